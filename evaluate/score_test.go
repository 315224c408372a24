package evaluate

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/nemorl/nemorl-slurm/record"
)

const testWeights = "abababababababababababababababababababababababababababababababab"

// The contamination check's hashes of the patch and the problems file.
const (
	testPatch    = "cdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"
	testProblems = "efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef"
)

func testQuestions() []string {
	qs := make([]string, record.Problems)
	for i := range qs {
		qs[i] = fmt.Sprintf("Problem %d: find the remainder when $%d^{2025}$ is divided by 1000.", i+1, i+2)
	}
	return qs
}

func testOptions() ScoreOptions {
	return ScoreOptions{Questions: testQuestions(), SlurmJobID: "777", WeightsSHA256: testWeights, WandbURL: "",
		Contamination: ContaminationCheck{PatchSHA256: testPatch, ProblemsSHA256: testProblems}}
}

// gymRow is a rollout row shaped like `gym eval run` output.
type gymRow map[string]any

func newRow(q string, task, rollout int, reward any) gymRow {
	return gymRow{
		"responses_create_params": map[string]any{
			"input":             []any{map[string]any{"role": "user", "content": DefaultPrompt + q}},
			"max_output_tokens": 31000,
			"temperature":       0.7,
		},
		"question":          q,
		"expected_answer":   "42",
		"_ng_task_index":    task,
		"_ng_rollout_index": rollout,
		"response":          map[string]any{"output": []any{map[string]any{"type": "message", "content": "\\boxed{42}"}}},
		"reward":            reward,
	}
}

// goodRows: question i gets i%9 correct answers (capped at 8), rows
// interleaved as Gym writes them (completion order, not input order).
func goodRows() ([]gymRow, []int) {
	qs := testQuestions()
	var rows []gymRow
	per := make([]int, len(qs))
	for r := range record.SamplesPerProblem {
		for i, q := range qs {
			reward := 0.0
			if r < i%9 {
				reward = 1.0
				per[i]++
			}
			rows = append(rows, newRow(q, i, r, reward))
		}
	}
	return rows, per
}

func encodeRows(t testing.TB, rows []gymRow) string {
	var b strings.Builder
	for _, r := range rows {
		j, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		b.Write(j)
		b.WriteByte('\n')
	}
	return b.String()
}

func TestScoreGood(t *testing.T) {
	rows, per := goodRows()
	text := encodeRows(t, rows)
	ev, err := Score(strings.NewReader(text), strings.NewReader(""), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, c := range per {
		total += c
	}
	sum := sha256.Sum256([]byte(text))
	want := record.Eval{
		Reward: float64(total) / 240, AIME25Exact: float64(total) / 240, AIME25AvgAt8: float64(total) / 240,
		Completed: 1, SlurmJobID: "777", WeightsSHA256: testWeights, RolloutsSHA256: hex.EncodeToString(sum[:]),
		Problems: 30, SamplesPerProblem: 8, Correct: total, PerQuestionCorrect: per,
		PatchSHA256: testPatch, ProblemsSHA256: testProblems,
	}
	if !reflect.DeepEqual(ev, want) {
		t.Errorf("got  %+v\nwant %+v", ev, want)
	}
	// The record it makes is printable and scans back.
	line, err := record.Format(&ev)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := record.Scan(record.StageEval, []byte(line+"\n")); err != nil {
		t.Fatal(err)
	}
}

func TestScoreVariantsAccepted(t *testing.T) {
	rows, _ := goodRows()
	// Without Gym's index fields, with integer rewards, no final newline,
	// whitespace-only failures file.
	for i := range rows {
		delete(rows[i], "_ng_task_index")
		delete(rows[i], "_ng_rollout_index")
		delete(rows[i], "question")
		if rows[i]["reward"] == 1.0 {
			rows[i]["reward"] = 1
		}
	}
	text := strings.TrimSuffix(encodeRows(t, rows), "\n")
	if _, err := Score(strings.NewReader(text), strings.NewReader(" \n\n"), testOptions()); err != nil {
		t.Fatal(err)
	}
	// All wrong, all right.
	for _, reward := range []float64{0, 1} {
		rows, _ := goodRows()
		for i := range rows {
			rows[i]["reward"] = reward
		}
		ev, err := Score(strings.NewReader(encodeRows(t, rows)), nil, testOptions())
		if err != nil || ev.Reward != reward || ev.Correct != int(reward*240) {
			t.Errorf("all %v: %+v %v", reward, ev, err)
		}
	}
}

func TestScoreRejections(t *testing.T) {
	qs := testQuestions()
	cases := []struct {
		name     string
		rows     func([]gymRow) []gymRow
		text     func(string) string // raw edit of the encoded rows
		failures string
		reason   Reason
		line     int
	}{
		{name: "failures file", failures: `{"_ng_failure_class":"http_500"}` + "\n", reason: ReasonFailedRollouts, line: 1},
		{name: "failures after blank lines", failures: "\n\n x", reason: ReasonFailedRollouts, line: 3},
		{name: "7 answers", rows: func(r []gymRow) []gymRow { return append(r[:5], r[6:]...) }, reason: ReasonMissingAnswers},
		{name: "no rows", rows: func([]gymRow) []gymRow { return nil }, reason: ReasonMissingAnswers},
		{name: "9 answers", rows: func(r []gymRow) []gymRow {
			return append(r, newRow(qs[3], 3, 8, 0.0))
		}, reason: ReasonExtraAnswers},
		{name: "reward 0.5", rows: func(r []gymRow) []gymRow { r[17]["reward"] = 0.5; return r }, reason: ReasonNonBinaryReward, line: 18},
		{name: "reward true", rows: func(r []gymRow) []gymRow { r[2]["reward"] = true; return r }, reason: ReasonNonBinaryReward, line: 3},
		{name: "reward string", rows: func(r []gymRow) []gymRow { r[2]["reward"] = "1.0"; return r }, reason: ReasonNonBinaryReward, line: 3},
		{name: "reward null", rows: func(r []gymRow) []gymRow { r[2]["reward"] = nil; return r }, reason: ReasonNonBinaryReward, line: 3},
		{name: "reward 2", rows: func(r []gymRow) []gymRow { r[2]["reward"] = 2; return r }, reason: ReasonNonBinaryReward, line: 3},
		{name: "reward tiny", rows: func(r []gymRow) []gymRow { r[2]["reward"] = 1e-300; return r }, reason: ReasonNonBinaryReward, line: 3},
		{name: "no reward", rows: func(r []gymRow) []gymRow { delete(r[239], "reward"); return r }, reason: ReasonMissingReward, line: 240},
		{name: "31 questions", rows: func(r []gymRow) []gymRow {
			for k := range 8 {
				r = append(r, newRow("Problem 31: an extra one.", 30, k, 1.0))
			}
			return r
		}, reason: ReasonUnknownQuestion, line: 241},
		{name: "question repeated with 16 answers under two task indexes", rows: func(r []gymRow) []gymRow {
			for k := range 8 {
				r = append(r, newRow(qs[0], 30, k, 1.0))
			}
			return r
		}, reason: ReasonDuplicateQ, line: 241},
		{name: "question repeated with 16 answers under one task index", rows: func(r []gymRow) []gymRow {
			for k := range 8 {
				r = append(r, newRow(qs[0], 0, 8+k, 1.0))
			}
			return r
		}, reason: ReasonExtraAnswers},
		{name: "question repeated, no indexes", rows: func(r []gymRow) []gymRow {
			for k := range 8 {
				r = append(r, newRow(qs[0], 0, k, 1.0))
			}
			for i := range r {
				delete(r[i], "_ng_task_index")
				delete(r[i], "_ng_rollout_index")
			}
			return r
		}, reason: ReasonExtraAnswers},
		{name: "duplicate rollout", rows: func(r []gymRow) []gymRow { r[30]["_ng_rollout_index"] = 0; return r }, reason: ReasonDuplicateRollout, line: 31},
		{name: "task index names two questions", rows: func(r []gymRow) []gymRow { r[1]["_ng_task_index"] = 0; return r }, reason: ReasonMalformedRow, line: 2},
		{name: "indexes on some rows only", rows: func(r []gymRow) []gymRow { delete(r[5], "_ng_task_index"); delete(r[5], "_ng_rollout_index"); return r }, reason: ReasonMalformedRow, line: 6},
		{name: "prompt without the eval instruction", rows: func(r []gymRow) []gymRow {
			r[4]["responses_create_params"].(map[string]any)["input"] = []any{map[string]any{"role": "user", "content": qs[4]}}
			return r
		}, reason: ReasonUnknownQuestion, line: 5},
		{name: "question field disagrees", rows: func(r []gymRow) []gymRow { r[4]["question"] = qs[5]; return r }, reason: ReasonQuestionField, line: 5},
		{name: "content not a string", rows: func(r []gymRow) []gymRow {
			r[4]["responses_create_params"].(map[string]any)["input"] = []any{map[string]any{"role": "user", "content": []any{"x"}}}
			return r
		}, reason: ReasonMalformedRow, line: 5},
		{name: "no input", rows: func(r []gymRow) []gymRow { delete(r[4], "responses_create_params"); return r }, reason: ReasonMalformedRow, line: 5},
		{name: "blank line", text: func(s string) string { return strings.Replace(s, "\n", "\n\n", 1) }, reason: ReasonMalformedRow, line: 2},
		{name: "not JSON", text: func(s string) string { return "oops\n" + s }, reason: ReasonMalformedRow, line: 1},
		{name: "truncated last row", text: func(s string) string { return s[:len(s)-20] }, reason: ReasonMalformedRow, line: 240},
		{name: "row too large", text: func(s string) string { return `{"pad":"` + strings.Repeat("x", MaxRowBytes) + "\"}\n" + s }, reason: ReasonRowTooLarge, line: 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rows, _ := goodRows()
			if c.rows != nil {
				rows = c.rows(rows)
			}
			text := encodeRows(t, rows)
			if c.text != nil {
				text = c.text(text)
			}
			ev, err := Score(strings.NewReader(text), strings.NewReader(c.failures), testOptions())
			var rej *Rejection
			if !errors.As(err, &rej) {
				t.Fatalf("got %v (%+v), want rejection %s", err, ev, c.reason)
			}
			if rej.Reason != c.reason || rej.Line != c.line {
				t.Errorf("got %v (line %d), want %s at line %d", err, rej.Line, c.reason, c.line)
			}
		})
	}
}

func TestScoreOptions(t *testing.T) {
	rows, _ := goodRows()
	text := encodeRows(t, rows)
	for name, mut := range map[string]func(*ScoreOptions){
		"29 questions":   func(o *ScoreOptions) { o.Questions = o.Questions[:29] },
		"dup question":   func(o *ScoreOptions) { o.Questions[3] = o.Questions[4] },
		"bad job id":     func(o *ScoreOptions) { o.SlurmJobID = "$(id)" },
		"bad weights":    func(o *ScoreOptions) { o.WeightsSHA256 = "" },
		"bad wandb link": func(o *ScoreOptions) { o.WandbURL = "a\nb" },
	} {
		o := testOptions()
		mut(&o)
		if _, err := Score(strings.NewReader(text), nil, o); err == nil || ReasonOf(err) != "" {
			t.Errorf("%s: %v, want a non-rejection error", name, err)
		}
	}
}

func TestScoreFiles(t *testing.T) {
	dir := t.TempDir()
	rows, _ := goodRows()
	rp := filepath.Join(dir, "eval_rollouts.jsonl")
	fp := filepath.Join(dir, "eval_rollouts_failures.jsonl")
	if err := os.WriteFile(rp, []byte(encodeRows(t, rows)), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ScoreFiles(rp, fp, testOptions()); err != nil {
		t.Errorf("absent failures file: %v", err)
	}
	if err := os.WriteFile(fp, []byte(`{"reward":0}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ScoreFiles(rp, fp, testOptions()); ReasonOf(err) != ReasonFailedRollouts {
		t.Errorf("non-empty failures file: %v", err)
	}
	if _, err := ScoreFiles(filepath.Join(dir, "absent"), "", testOptions()); err == nil || ReasonOf(err) != "" {
		t.Errorf("absent rollouts: %v", err)
	}
}

func TestLoadQuestions(t *testing.T) {
	var b strings.Builder
	for _, q := range testQuestions() {
		j, _ := json.Marshal(map[string]any{"question": q, "expected_answer": 42, "id": "aime25-x"})
		b.Write(j)
		b.WriteByte('\n')
	}
	good := b.String()
	qs, err := LoadQuestions(strings.NewReader(good))
	if err != nil || !reflect.DeepEqual(qs, testQuestions()) {
		t.Fatalf("LoadQuestions: %v", err)
	}
	lines := strings.SplitAfter(good, "\n")
	for name, c := range map[string]struct {
		text   string
		reason Reason
	}{
		"29 rows":        {strings.Join(lines[1:], ""), ReasonBadQuestions},
		"31 rows":        {good + `{"question":"another"}` + "\n", ReasonBadQuestions},
		"duplicate":      {good[:len(good)-len(lines[29])] + lines[0], ReasonDuplicateQ},
		"no question":    {`{"problem":"x"}` + "\n" + good, ReasonBadQuestions},
		"empty question": {`{"question":""}` + "\n" + good, ReasonBadQuestions},
		"not JSON":       {"x\n" + good, ReasonBadQuestions},
	} {
		if _, err := LoadQuestions(strings.NewReader(c.text)); ReasonOf(err) != c.reason {
			t.Errorf("%s: %v, want %s", name, err, c.reason)
		}
	}
}
