package record

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
)

const (
	sha1hex = "1111111111111111111111111111111111111111111111111111111111111111"
	sha2hex = "2222222222222222222222222222222222222222222222222222222222222222"
	sha3hex = "3333333333333333333333333333333333333333333333333333333333333333"
)

func goodEval() *Eval {
	per := make([]int, Problems)
	correct := 0
	for i := range per {
		per[i] = i % 3 // 0,1,2,…: sums to 30
		correct += per[i]
	}
	r := RewardFor(correct)
	return &Eval{
		Reward: r, AIME25Exact: r, AIME25AvgAt8: r, Completed: 1,
		WandbURL: "https://wandb.ai/x/y/runs/z?a=1&b=2", SlurmJobID: "4242",
		WeightsSHA256: sha1hex, RolloutsSHA256: sha2hex,
		Problems: Problems, SamplesPerProblem: SamplesPerProblem,
		Correct: correct, PerQuestionCorrect: per,
		PatchSHA256: sha3hex, ProblemsSHA256: sha1hex,
		GPUName: "NVIDIA H100 80GB HBM3", GPUMemoryMiB: 81559, GPUCount: 1,
	}
}

func goodTrain() *Train {
	return &Train{Status: StatusOK, TrainReward: 0.31, InnerSteps: 42, WeightsSHA256: sha1hex,
		WeightsBytes: 3087467520, TrainerExitStatus: 0, GPUName: "NVIDIA H100 80GB HBM3", GPUMemoryMiB: 81559, GPUCount: 1}
}

func goodAuthor() *Author {
	return &Author{PatchSHA256: sha3hex, PatchBytes: 1234, FilesChanged: 3, Turns: 57,
		ExitStatus: 0, TimedOut: false, ResponseSHA256: sha2hex, TerminalReason: TerminalSuccess, ModelCalls: 57}
}

func mustFormat(t testing.TB, r Record) string {
	t.Helper()
	s, err := Format(r)
	if err != nil {
		t.Fatalf("Format: %v", err)
	}
	return s
}

// evalLine returns the good eval record line with old replaced by new in
// its JSON (old must occur).
func evalLine(t *testing.T, old, new string) string {
	t.Helper()
	s := mustFormat(t, goodEval())
	if !strings.Contains(s, old) {
		t.Fatalf("%q not in %s", old, s)
	}
	return strings.Replace(s, old, new, 1)
}

func TestFieldNames(t *testing.T) {
	want := map[Stage][]string{
		StageAuthor: {"patch_sha256", "patch_bytes", "files_changed", "turns", "exit_status", "timed_out", "response_sha256", "terminal_reason", "model_calls", "dropped_events"},
		StageTrain:  {"status", "train_reward", "inner_steps", "weights_sha256", "weights_bytes", "trainer_exit_status", "gpu_name", "gpu_memory_mib", "gpu_count"},
		StageEval: {"reward", "aime25_exact", "aime25_avg_at_8", "completed", "wandb_url", "slurm_job_id",
			"weights_sha256", "rollouts_sha256", "problems", "samples_per_problem", "correct", "per_question_correct",
			"patch_sha256", "problems_sha256", "contaminated", "contamination", "gpu_name", "gpu_memory_mib", "gpu_count"},
	}
	for s, w := range want {
		if got := FieldNames(s); !reflect.DeepEqual(got, w) {
			t.Errorf("%s fields = %v, want %v", s, got, w)
		}
	}
	// Only the train record's GPU fields may be left out.
	for s, w := range map[Stage][]string{StageAuthor: nil, StageTrain: {"gpu_name", "gpu_memory_mib", "gpu_count"}, StageEval: nil} {
		if got := OptionalFieldNames(s); !reflect.DeepEqual(got, w) {
			t.Errorf("%s optional fields = %v, want %v", s, got, w)
		}
	}
}

func TestFormatStable(t *testing.T) {
	got := mustFormat(t, goodTrain())
	want := `NEMORL_ENV_TRAIN_RESULT={"status":"ok","train_reward":0.31,"inner_steps":42,"weights_sha256":"` + sha1hex +
		`","weights_bytes":3087467520,"trainer_exit_status":0,"gpu_name":"NVIDIA H100 80GB HBM3","gpu_memory_mib":81559,"gpu_count":1}`
	if got != want {
		t.Errorf("Format =\n%s\nwant\n%s", got, want)
	}
	e := mustFormat(t, goodEval())
	if !strings.HasPrefix(e, `NEMORL_ENV_RESULT={"reward":0.125,"aime25_exact":0.125,"aime25_avg_at_8":0.125,"completed":1,"wandb_url":"https://wandb.ai/x/y/runs/z?a=1&b=2",`) {
		t.Errorf("eval line: %s", e)
	}
	if strings.Contains(e, "\n") {
		t.Error("Format output contains a newline")
	}
	var b bytes.Buffer
	if err := Write(&b, goodAuthor()); err != nil || !strings.HasSuffix(b.String(), "}\n") || strings.Count(b.String(), "\n") != 1 {
		t.Errorf("Write = %q, %v", b.String(), err)
	}
}

func TestFormatRefusesInvalid(t *testing.T) {
	e := goodEval()
	e.Reward = 0.9
	if _, err := Format(e); ReasonOf(err) != ReasonRewardMismatch {
		t.Errorf("Format(bad) error = %v", err)
	}
	var b bytes.Buffer
	if err := Write(&b, &Eval{}); err == nil || b.Len() != 0 {
		t.Errorf("Write(zero eval) = %v, wrote %q", err, b.String())
	}
}

func TestRoundTrip(t *testing.T) {
	for _, r := range []Record{goodAuthor(), goodTrain(), goodEval(),
		&Author{PatchSHA256: EmptySHA256, ResponseSHA256: sha1hex, Turns: 200, ExitStatus: -1, TimedOut: true,
			TerminalReason: TerminalTimeout, ModelCalls: 250, DroppedEvents: 2},
		&Author{PatchSHA256: EmptySHA256, ResponseSHA256: sha1hex, ExitStatus: 1, TerminalReason: TerminalAPIError},
		&Train{Status: StatusTrainerFailed, TrainerExitStatus: 1, TrainReward: -0.5},
		&Train{Status: StatusNoCheckpoint, TrainReward: 0.2, InnerSteps: 0},
	} {
		out := "log line\n" + mustFormat(t, r) + "\nmore log\n"
		got, err := Scan(r.Stage(), []byte(out))
		if err != nil {
			t.Fatalf("%s: Scan: %v", r.Stage(), err)
		}
		if !reflect.DeepEqual(got, r) {
			t.Errorf("%s: round trip\n got %+v\nwant %+v", r.Stage(), got, r)
		}
	}
}

func TestScanEvalRejections(t *testing.T) {
	good := mustFormat(t, goodEval())
	train := mustFormat(t, goodTrain())
	author := mustFormat(t, goodAuthor())
	cases := []struct {
		name   string
		out    string
		reason Reason
		field  string
		line   int
	}{
		{"empty output", "", ReasonMissingRecord, "", 0},
		{"only logs", "hello\nworld\n", ReasonMissingRecord, "", 0},
		{"prefix not at line start", "+ echo '" + good + "'\n", ReasonMissingRecord, "", 0},
		{"indented prefix", "  " + good + "\n", ReasonMissingRecord, "", 0},
		{"longer name is not the prefix", strings.Replace(good, "NEMORL_ENV_RESULT=", "NEMORL_ENV_RESULTS=", 1), ReasonMissingRecord, "", 0},
		{"duplicate", "a\n" + good + "\nb\n" + good + "\n", ReasonDuplicateRecord, "", 4},
		{"duplicate, second broken", good + "\nNEMORL_ENV_RESULT={\n", ReasonDuplicateRecord, "", 2},
		{"foreign train record", "x\n" + train + "\n" + good + "\n", ReasonForeignRecord, "", 2},
		{"foreign author record", good + "\n" + author + "\n", ReasonForeignRecord, "", 2},
		{"foreign wins over duplicate", good + "\n" + good + "\n" + train + "\n", ReasonForeignRecord, "", 3},
		{"bare prefix", "NEMORL_ENV_RESULT=\n", ReasonMalformedJSON, "", 1},
		{"space before object", strings.Replace(good, "={", "= {", 1), ReasonMalformedJSON, "", 1},
		{"not JSON", "NEMORL_ENV_RESULT={reward: 1}\n", ReasonMalformedJSON, "", 1},
		{"truncated JSON", good[:strings.Index(good, `"per_question_correct":[`)+30] + "\n", ReasonMalformedJSON, "per_question_correct", 1},
		{"array", "NEMORL_ENV_RESULT=[1]\n", ReasonMalformedJSON, "", 1},
		{"invalid UTF-8", strings.Replace(good, "wandb.ai", "wandb\xff.ai", 1), ReasonMalformedJSON, "", 1},
		{"trailing garbage", good + " x\n", ReasonTrailingData, "", 1},
		{"two objects", good + "{}\n", ReasonTrailingData, "", 1},
		{"unknown field", evalLine(t, `"completed":1`, `"completed":1,"bonus":1`), ReasonUnknownField, "bonus", 1},
		{"field in other case", evalLine(t, `"reward":`, `"Reward":`), ReasonUnknownField, "Reward", 1},
		{"missing field", evalLine(t, `"completed":1,`, ``), ReasonMissingField, "completed", 1},
		{"duplicate field", evalLine(t, `"completed":1`, `"completed":1,"reward":1`), ReasonDuplicateField, "reward", 1},
		{"null", evalLine(t, `"correct":30`, `"correct":null`), ReasonWrongType, "correct", 1},
		{"string for number", evalLine(t, `"reward":0.125`, `"reward":"0.125"`), ReasonWrongType, "reward", 1},
		{"float for integer", evalLine(t, `"completed":1`, `"completed":1.0`), ReasonWrongType, "completed", 1},
		{"integer overflow", evalLine(t, `"correct":30`, `"correct":99999999999999999999`), ReasonWrongType, "correct", 1},
		{"number for string", evalLine(t, `"slurm_job_id":"4242"`, `"slurm_job_id":4242`), ReasonWrongType, "slurm_job_id", 1},
		{"object for array", evalLine(t, `"per_question_correct":[`, `"per_question_correct":{"a":[`), ReasonMalformedJSON, "", 1},
		{"non-integer entry", evalLine(t, `"per_question_correct":[0,`, `"per_question_correct":[0.5,`), ReasonWrongType, "per_question_correct", 1},
		{"string entry", evalLine(t, `"per_question_correct":[0,`, `"per_question_correct":["0",`), ReasonWrongType, "per_question_correct", 1},
		{"infinite reward", evalLine(t, `"reward":0.125`, `"reward":1e999`), ReasonNonFinite, "reward", 1},
		{"infinite exact", evalLine(t, `"aime25_exact":0.125`, `"aime25_exact":-1e400`), ReasonNonFinite, "aime25_exact", 1},
		{"NaN literal", evalLine(t, `"reward":0.125`, `"reward":NaN`), ReasonMalformedJSON, "reward", 1},
		{"not completed", evalLine(t, `"completed":1`, `"completed":0`), ReasonNotCompleted, "completed", 1},
		{"completed 2", evalLine(t, `"completed":1`, `"completed":2`), ReasonNotCompleted, "completed", 1},
		{"31 problems", evalLine(t, `"problems":30`, `"problems":31`), ReasonBadCounts, "problems", 1},
		{"7 samples", evalLine(t, `"samples_per_problem":8`, `"samples_per_problem":7`), ReasonBadCounts, "samples_per_problem", 1},
		{"29 entries", evalLine(t, `"per_question_correct":[0,`, `"per_question_correct":[`), ReasonBadCounts, "per_question_correct", 1},
		{"31 entries", evalLine(t, `"per_question_correct":[`, `"per_question_correct":[0,`), ReasonBadCounts, "per_question_correct", 1},
		{"entry above 8", evalLine(t, `"per_question_correct":[0,1,`, `"per_question_correct":[0,9,`), ReasonCountOutOfRange, "per_question_correct", 1},
		{"negative entry", evalLine(t, `"per_question_correct":[0,1,2,`, `"per_question_correct":[0,-1,4,`), ReasonCountOutOfRange, "per_question_correct", 1},
		{"correct above 240", evalLine(t, `"correct":30`, `"correct":241`), ReasonCountOutOfRange, "correct", 1},
		{"sum mismatch", evalLine(t, `"per_question_correct":[0,1,`, `"per_question_correct":[0,2,`), ReasonCountSumMismatch, "per_question_correct", 1},
		{"reward above 1", evalLine(t, `"reward":0.125`, `"reward":1.5`), ReasonRewardOutOfRange, "reward", 1},
		{"negative reward", evalLine(t, `"reward":0.125`, `"reward":-0.125`), ReasonRewardOutOfRange, "reward", 1},
		{"reward not correct/240", evalLine(t, `"reward":0.125`, `"reward":0.5`), ReasonRewardMismatch, "reward", 1},
		{"reward nearly correct/240", evalLine(t, `"reward":0.125`, `"reward":0.12500000000000003`), ReasonRewardMismatch, "reward", 1},
		{"exact differs", evalLine(t, `"aime25_exact":0.125`, `"aime25_exact":0.5`), ReasonRewardMismatch, "aime25_exact", 1},
		{"avg@8 differs", evalLine(t, `"aime25_avg_at_8":0.125`, `"aime25_avg_at_8":0`), ReasonRewardMismatch, "aime25_avg_at_8", 1},
		{"bad job id", evalLine(t, `"slurm_job_id":"4242"`, `"slurm_job_id":"42;rm"`), ReasonInvalidValue, "slurm_job_id", 1},
		{"empty job id", evalLine(t, `"slurm_job_id":"4242"`, `"slurm_job_id":""`), ReasonInvalidValue, "slurm_job_id", 1},
		{"bad weights hash", evalLine(t, `"weights_sha256":"1111`, `"weights_sha256":"ABCD`), ReasonInvalidValue, "weights_sha256", 1},
		{"control char in url", evalLine(t, `wandb.ai`, `wandb\u0007.ai`), ReasonInvalidValue, "wandb_url", 1},
		{"bad patch hash", evalLine(t, `"patch_sha256":"3333`, `"patch_sha256":"333`), ReasonInvalidValue, "patch_sha256", 1},
		{"bad problems hash", evalLine(t, `"problems_sha256":"1111`, `"problems_sha256":"x111`), ReasonInvalidValue, "problems_sha256", 1},
		{"contaminated without evidence", evalLine(t, `"contaminated":false`, `"contaminated":true`), ReasonInvalidValue, "contamination", 1},
		{"evidence, not contaminated", evalLine(t, `"contamination":""`, `"contamination":"problem 3"`), ReasonInvalidValue, "contamination", 1},
		{"contaminated and scored", evalLine(t, `"contaminated":false,"contamination":""`, `"contaminated":true,"contamination":"problem 3"`), ReasonInvalidValue, "correct", 1},
		{"evidence too long", evalLine(t, `"contaminated":false,"contamination":""`, `"contaminated":true,"contamination":"`+strings.Repeat("e", MaxEvidenceBytes+1)+`"`), ReasonInvalidValue, "contamination", 1},
		{"control char in evidence", evalLine(t, `"contaminated":false,"contamination":""`, `"contaminated":true,"contamination":"a\nb"`), ReasonInvalidValue, "contamination", 1},
		{"oversized", evalLine(t, `"wandb_url":"`, `"wandb_url":"`+strings.Repeat("a", MaxRecordBytes)), ReasonOversizedRecord, "", 1},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, err := Scan(StageEval, []byte(c.out))
			if err == nil {
				t.Fatalf("accepted: %+v", rec)
			}
			var rej *Rejection
			if !errors.As(err, &rej) {
				t.Fatalf("error %v is not a *Rejection", err)
			}
			if rej.Reason != c.reason || rej.Field != c.field || rej.Line != c.line || rej.Stage != StageEval {
				t.Errorf("got reason=%s field=%q line=%d stage=%s (%v), want reason=%s field=%q line=%d",
					rej.Reason, rej.Field, rej.Line, rej.Stage, err, c.reason, c.field, c.line)
			}
			if !errors.Is(err, &Rejection{Reason: c.reason}) || errors.Is(err, &Rejection{Reason: "other"}) {
				t.Error("errors.Is by reason does not work")
			}
		})
	}
}

func TestTypedScans(t *testing.T) {
	out := func(r Record) []byte { return []byte(mustFormat(t, r) + "\n") }
	if a, err := ScanAuthor(out(goodAuthor()), 0); err != nil || a.Turns != 57 {
		t.Errorf("ScanAuthor: %v", err)
	}
	if tr, err := ScanTrain(out(goodTrain()), 0); err != nil || tr.InnerSteps != 42 {
		t.Errorf("ScanTrain: %v", err)
	}
	if e, err := ScanEval(out(goodEval()), 0); err != nil || e.Correct != 30 {
		t.Errorf("ScanEval: %v", err)
	}
	if e, err := ScanEval(out(goodTrain()), 0); e != nil || ReasonOf(err) != ReasonForeignRecord {
		t.Errorf("ScanEval(train output): %v", err)
	}
	if _, err := ScanAuthor(nil, 0); ReasonOf(err) != ReasonMissingRecord {
		t.Errorf("ScanAuthor(nil): %v", err)
	}
	if _, err := ScanTrain(nil, 0); ReasonOf(err) != ReasonMissingRecord {
		t.Errorf("ScanTrain(nil): %v", err)
	}
}

func TestScanDetails(t *testing.T) {
	good := mustFormat(t, goodEval())
	out := "a\n" + good + "\nb\nc\n" + good + "\n"
	_, err := Scan(StageEval, []byte(out))
	var rej *Rejection
	if !errors.As(err, &rej) || !strings.Contains(rej.Detail, "line 2, line 5") {
		t.Fatalf("duplicate detail: %v", err)
	}
	if want := int64(2 + len(good) + 1 + 4); rej.Line != 5 || rej.Offset != want {
		t.Errorf("line %d offset %d, want 5 %d", rej.Line, rej.Offset, want)
	}
	if !strings.Contains(err.Error(), "duplicate_record") || !strings.Contains(err.Error(), "line 5") {
		t.Errorf("message: %v", err)
	}
}

func TestScanAccepts(t *testing.T) {
	good := mustFormat(t, goodEval())
	for name, out := range map[string]string{
		"alone":             good,
		"no final newline":  "log\n" + good,
		"CRLF":              "log\r\n" + good + "\r\n",
		"trailing spaces":   good + "  \t\n",
		"other NEMORL vars": "NEMORL_ENV_EVAL_CONCURRENCY=30\nNEMORL_ENV_\n" + good + "\n",
		"mention mid-line":  "+ echo NEMORL_ENV_TRAIN_RESULT={}\n" + good + "\n",
	} {
		if _, err := Scan(StageEval, []byte(out)); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// The eval prefix is a substring of neither other prefix and vice versa:
// a train record is never taken for an eval record.
func TestPrefixesDisjoint(t *testing.T) {
	train := mustFormat(t, goodTrain())
	if _, err := Scan(StageTrain, []byte(train+"\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := Scan(StageEval, []byte(train+"\n")); ReasonOf(err) != ReasonForeignRecord {
		t.Errorf("train record in eval output: %v", err)
	}
	eval := mustFormat(t, goodEval())
	if _, err := Scan(StageTrain, []byte(eval+"\n")); ReasonOf(err) != ReasonForeignRecord {
		t.Errorf("eval record in train output: %v", err)
	}
	for _, a := range Stages {
		for _, b := range Stages {
			if a != b && strings.HasPrefix(a.Prefix(), b.Prefix()) {
				t.Errorf("%s prefix starts with %s prefix", a, b)
			}
		}
	}
}

func TestScanTail(t *testing.T) {
	good := mustFormat(t, goodEval())
	file := strings.Repeat("noise noise noise\n", 100) + good + "\nfooter\n"
	recordAt := strings.Index(file, good)

	// Tail starting in the middle of a log line: the partial line is dropped.
	off := int64(recordAt - 5)
	rec, err := ScanTail(StageEval, []byte(file[off:]), off)
	if err != nil || rec.(*Eval).Correct != 30 {
		t.Fatalf("tail: %v", err)
	}
	// Tail starting inside the record: the partial record is dropped and
	// must not be parsed (it would be malformed); the record is missing.
	off = int64(recordAt + 20)
	_, err = ScanTail(StageEval, []byte(file[off:]), off)
	if ReasonOf(err) != ReasonMissingRecord {
		t.Errorf("tail inside record: %v", err)
	}
	// A tail starting with what looks like a whole record is still skipped
	// when offset > 0: the byte before it is unknown.
	off = int64(recordAt)
	if _, err = ScanTail(StageEval, []byte(file[off:]), off); ReasonOf(err) != ReasonMissingRecord {
		t.Errorf("tail at record start: %v", err)
	}
	// ...so a collector reads one byte more.
	off = int64(recordAt - 1)
	if _, err = ScanTail(StageEval, []byte(file[off:]), off); err != nil {
		t.Errorf("tail one byte before record: %v", err)
	}
	// A tail without any newline holds no whole line.
	if _, err = ScanTail(StageEval, []byte("NEMORL_ENV_RESULT={"), 10); ReasonOf(err) != ReasonMissingRecord {
		t.Errorf("newline-less tail: %v", err)
	}
	// Offsets are absolute, lines count from the first whole line.
	dup := file + good + "\n"
	off = int64(recordAt - 5)
	_, err = ScanTail(StageEval, []byte(dup[off:]), off)
	var rej *Rejection
	if !errors.As(err, &rej) || rej.Reason != ReasonDuplicateRecord || rej.Line != 3 || rej.Offset != int64(len(file)) {
		t.Errorf("tail duplicate: %+v", rej)
	}
	if _, err := ScanTail(StageEval, nil, -1); err == nil || ReasonOf(err) != "" {
		t.Errorf("negative offset: %v", err)
	}
	if _, err := Scan("nope", []byte(good)); err == nil || ReasonOf(err) != "" {
		t.Errorf("unknown stage: %v", err)
	}
}

func TestTrainRejections(t *testing.T) {
	cases := []struct {
		name   string
		mut    func(*Train)
		reason Reason
		field  string
	}{
		{"unknown status", func(r *Train) { r.Status = "crashed" }, ReasonInvalidValue, "status"},
		{"negative steps", func(r *Train) { r.InnerSteps = -1 }, ReasonInvalidValue, "inner_steps"},
		{"bad hash", func(r *Train) { r.WeightsSHA256 = "xyz" }, ReasonInvalidValue, "weights_sha256"},
		{"exit status range", func(r *Train) { r.TrainerExitStatus = 256 }, ReasonInvalidValue, "trainer_exit_status"},
		{"ok with failed trainer", func(r *Train) { r.TrainerExitStatus = 1 }, ReasonInvalidValue, "trainer_exit_status"},
		{"ok without weights hash", func(r *Train) { r.WeightsSHA256 = "" }, ReasonInvalidValue, "weights_sha256"},
		{"ok without weights", func(r *Train) { r.WeightsBytes = 0 }, ReasonInvalidValue, "weights_bytes"},
		{"ok without steps", func(r *Train) { r.InnerSteps = 0 }, ReasonInvalidValue, "inner_steps"},
		{"failed with weights", func(r *Train) { r.Status, r.TrainerExitStatus = StatusTrainerFailed, 1 }, ReasonInvalidValue, "weights_sha256"},
		{"trainer_failed exit 0", func(r *Train) { r.Status, r.WeightsSHA256, r.WeightsBytes = StatusTrainerFailed, "", 0 }, ReasonInvalidValue, "trainer_exit_status"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := goodTrain()
			c.mut(r)
			// Bypass Format's validation to print the bad record.
			line := mustLine(t, r)
			_, err := Scan(StageTrain, []byte(line+"\n"))
			var rej *Rejection
			if !errors.As(err, &rej) || rej.Reason != c.reason || rej.Field != c.field {
				t.Errorf("got %v, want %s %s", err, c.reason, c.field)
			}
		})
	}
	line := strings.Replace(mustFormat(t, goodTrain()), "0.31", "1e309", 1)
	if _, err := Scan(StageTrain, []byte(line)); ReasonOf(err) != ReasonNonFinite {
		t.Errorf("infinite train_reward: %v", err)
	}
}

func TestAuthorRejections(t *testing.T) {
	cases := []struct {
		name  string
		mut   func(*Author)
		field string
	}{
		{"bad patch hash", func(a *Author) { a.PatchSHA256 = "A" + sha3hex[1:] }, "patch_sha256"},
		{"bad response hash", func(a *Author) { a.ResponseSHA256 = "" }, "response_sha256"},
		{"negative bytes", func(a *Author) { a.PatchBytes = -1 }, "patch_bytes"},
		{"empty patch, wrong hash", func(a *Author) { a.PatchBytes, a.FilesChanged = 0, 0 }, "patch_sha256"},
		{"empty-patch hash, bytes", func(a *Author) { a.PatchSHA256 = EmptySHA256 }, "patch_sha256"},
		{"files without bytes", func(a *Author) { a.PatchBytes, a.PatchSHA256 = 0, EmptySHA256 }, "files_changed"},
		{"too many turns", func(a *Author) { a.Turns = 201 }, "turns"},
		{"exit status", func(a *Author) { a.ExitStatus = -2 }, "exit_status"},
		{"terminal reason", func(a *Author) { a.TerminalReason = "done" }, "terminal_reason"},
		{"negative model calls", func(a *Author) { a.ModelCalls = -1 }, "model_calls"},
		{"too many model calls", func(a *Author) { a.ModelCalls = MaxModelCalls + 1 }, "model_calls"},
		{"negative dropped events", func(a *Author) { a.DroppedEvents = -1 }, "dropped_events"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := goodAuthor()
			c.mut(a)
			_, err := Scan(StageAuthor, []byte(mustLine(t, a)))
			var rej *Rejection
			if !errors.As(err, &rej) || rej.Reason != ReasonInvalidValue || rej.Field != c.field {
				t.Errorf("got %v, want invalid_value %s", err, c.field)
			}
		})
	}
	line := strings.Replace(mustFormat(t, goodAuthor()), `"timed_out":false`, `"timed_out":0`, 1)
	if _, err := Scan(StageAuthor, []byte(line)); ReasonOf(err) != ReasonWrongType {
		t.Errorf("number for bool: %v", err)
	}
}

// mustLine prints a record without validating it.
func mustLine(t *testing.T, r Record) string {
	t.Helper()
	var b strings.Builder
	b.WriteString(r.Stage().Prefix())
	if err := jsonEncode(&b, r); err != nil {
		t.Fatal(err)
	}
	return strings.TrimSuffix(b.String(), "\n")
}

func TestVerify(t *testing.T) {
	ev, tr := goodEval(), goodTrain()
	if err := VerifyEvalJob(ev, "4242"); err != nil {
		t.Error(err)
	}
	if err := VerifyEvalJob(ev, "4243"); ReasonOf(err) != ReasonJobIDMismatch {
		t.Errorf("job id: %v", err)
	}
	if err := VerifyWeights(tr, ev); err != nil {
		t.Error(err)
	}
	tr2 := goodTrain()
	tr2.WeightsSHA256 = sha3hex
	if err := VerifyWeights(tr2, ev); ReasonOf(err) != ReasonWeightsMismatch {
		t.Errorf("weights: %v", err)
	}
	tr3 := &Train{Status: StatusTrainerFailed, TrainerExitStatus: 1}
	if err := VerifyWeights(tr3, ev); ReasonOf(err) != ReasonTrainNotOK {
		t.Errorf("train not ok: %v", err)
	}
	// An empty hash on both sides is not a match.
	if err := VerifyWeights(&Train{Status: StatusOK}, &Eval{}); ReasonOf(err) != ReasonWeightsMismatch {
		t.Errorf("empty hashes: %v", err)
	}
	patch := []byte("diff --git a/recipe.yaml b/recipe.yaml\n")
	a := goodAuthor()
	a.PatchBytes = int64(len(patch))
	a.PatchSHA256 = "b0f2d2e1a0a2b1f2b7bd0cf6ea31a6ef3b3c8b1b5f4fd1e8a3c9c4ad5b1a8c21"
	if err := VerifyPatch(a, patch); ReasonOf(err) != ReasonPatchMismatch {
		t.Errorf("patch mismatch: %v", err)
	}
	empty := &Author{PatchSHA256: EmptySHA256}
	if err := VerifyPatch(empty, nil); err != nil {
		t.Errorf("empty patch: %v", err)
	}
}

func jsonEncode(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// TestAuthorNewFieldsRequired: an author record without terminal_reason,
// model_calls or dropped_events (the format before them) is rejected as a
// missing field, and a value of the wrong kind as such.
func TestAuthorNewFieldsRequired(t *testing.T) {
	line := mustFormat(t, goodAuthor())
	for _, c := range []struct{ old, new, field string }{
		{`,"terminal_reason":"success"`, ``, "terminal_reason"},
		{`,"model_calls":57`, ``, "model_calls"},
		{`,"dropped_events":0`, ``, "dropped_events"},
	} {
		if !strings.Contains(line, c.old) {
			t.Fatalf("%s not in %s", c.old, line)
		}
		_, err := Scan(StageAuthor, []byte(strings.Replace(line, c.old, c.new, 1)+"\n"))
		var rej *Rejection
		if !errors.As(err, &rej) || rej.Reason != ReasonMissingField || rej.Field != c.field {
			t.Errorf("without %s: %v", c.field, err)
		}
	}
	if _, err := Scan(StageAuthor, []byte(strings.Replace(line, `"model_calls":57`, `"model_calls":"57"`, 1)+"\n")); err == nil {
		t.Error("a string model_calls was accepted")
	}
}
