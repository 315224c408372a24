package evaluate

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"unicode/utf8"

	"github.com/nemorl/nemorl-slurm/contamination"
	"github.com/nemorl/nemorl-slurm/record"
	"github.com/nemorl/nemorl-slurm/stages"
)

// MaxProblemsBytes bounds the eval problems file the contamination check
// reads (AIME25's 30 rows are a few tens of KB).
const MaxProblemsBytes = 16 << 20

// ContaminationCheck is what `evaluate contamination` found in the
// author's patch, and what the eval record binds (Bind): the patch and
// the problems file checked, by sha256, and the evidence.
type ContaminationCheck struct {
	PatchSHA256    string `json:"patch_sha256"`
	PatchBytes     int64  `json:"patch_bytes"`
	ProblemsSHA256 string `json:"problems_sha256"`
	Problems       int    `json:"problems"`
	// Evidence is the findings in one line, as the eval record carries it
	// (at most record.MaxEvidenceBytes); "" when not contaminated.
	Evidence string               `json:"evidence"`
	Report   contamination.Report `json:"report"`
}

// CheckContamination reads the patch (a regular file of at most
// stages.MaxPatchBytes) and the problems file (JSON Lines, question and
// expected_answer) and runs contamination.CheckWith. The patch is only
// read: it is data here, never applied. pristineDir, when not "", is the
// image's pristine tree (recipe.yaml and NeMo-RL/ as the patch names them):
// the bases of binary deltas are read from it, never outside it.
func CheckContamination(patchPath, problemsPath, pristineDir string) (ContaminationCheck, error) {
	patch, err := readBounded(patchPath, stages.MaxPatchBytes)
	if err != nil {
		return ContaminationCheck{}, fmt.Errorf("patch: %w", err)
	}
	raw, err := readBounded(problemsPath, MaxProblemsBytes)
	if err != nil {
		return ContaminationCheck{}, fmt.Errorf("problems: %w", err)
	}
	problems, err := contamination.LoadProblems(bytes.NewReader(raw))
	if err != nil {
		return ContaminationCheck{}, fmt.Errorf("problems %s: %w", problemsPath, err)
	}
	var opts contamination.Options
	if pristineDir != "" {
		root, err := os.OpenRoot(pristineDir)
		if err != nil {
			return ContaminationCheck{}, fmt.Errorf("pristine tree: %w", err)
		}
		defer root.Close()
		opts.Pristine = func(name string) ([]byte, error) {
			return readBoundedIn(root, name, contamination.DefaultMaxDecoded)
		}
	}
	rep := contamination.CheckWith(patch, problems, opts)
	return ContaminationCheck{
		PatchSHA256: sha256Hex(patch), PatchBytes: int64(len(patch)),
		ProblemsSHA256: sha256Hex(raw), Problems: len(problems),
		Evidence: Evidence(rep), Report: rep,
	}, nil
}

// Evidence is a report's findings in one line of at most
// record.MaxEvidenceBytes: "" when not contaminated.
func Evidence(rep contamination.Report) string {
	if !rep.Contaminated {
		return ""
	}
	var b strings.Builder
	refusedOnly, opaqueOnly := true, true
	for _, f := range rep.Findings {
		if f.Kind != contamination.KindBinary && f.Kind != contamination.KindOpaque {
			refusedOnly = false
		}
		if f.Kind != contamination.KindOpaque {
			opaqueOnly = false
		}
	}
	switch {
	case opaqueOnly:
		// readable or refused: data the check cannot read is no proof of
		// contamination, but a patch has no need to carry it
		b.WriteString(record.EvidenceOpaque)
	case refusedOnly:
		b.WriteString(record.EvidenceUncheckable)
	default:
		b.WriteString(record.EvidenceFound + ": ")
	}
	for i, f := range rep.Findings {
		part := f.Detail
		if i > 0 {
			part = "; " + part
		}
		more := fmt.Sprintf("; and %d more findings", len(rep.Findings)-i)
		if b.Len()+len(part) > record.MaxEvidenceBytes-len(more) {
			b.WriteString(more)
			break
		}
		b.WriteString(part)
	}
	s := strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f || r == utf8.RuneError {
			return ' '
		}
		return r
	}, b.String())
	if s == "" || len(rep.Findings) == 0 {
		s = record.EvidenceFound
	}
	return s
}

// LoadContaminationCheck reads the JSON report `evaluate contamination
// --report` wrote.
func LoadContaminationCheck(path string) (ContaminationCheck, error) {
	b, err := readBounded(path, 1<<20)
	if err != nil {
		return ContaminationCheck{}, err
	}
	var c ContaminationCheck
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return ContaminationCheck{}, fmt.Errorf("%s: %w", path, err)
	}
	switch {
	case !record.IsSHA256Hex(c.PatchSHA256) || !record.IsSHA256Hex(c.ProblemsSHA256):
		return ContaminationCheck{}, fmt.Errorf("%s: patch_sha256 and problems_sha256 must be 64 lowercase hex digits", path)
	case c.Report.Contaminated != (c.Evidence != ""):
		return ContaminationCheck{}, fmt.Errorf("%s: contaminated is %v but the evidence is %q", path, c.Report.Contaminated, c.Evidence)
	case len(c.Evidence) > record.MaxEvidenceBytes:
		return ContaminationCheck{}, fmt.Errorf("%s: evidence of %d bytes, more than %d", path, len(c.Evidence), record.MaxEvidenceBytes)
	}
	return c, nil
}

// Bind puts the check into the eval record.
func (c ContaminationCheck) Bind(ev *record.Eval) {
	ev.PatchSHA256, ev.ProblemsSHA256 = c.PatchSHA256, c.ProblemsSHA256
	ev.Contaminated, ev.Contamination = c.Report.Contaminated, c.Evidence
}

// ContaminatedRecord is the eval record of a contaminated patch: the
// weights are not scored, the reward is 0, and the evidence goes with it.
// There are no rollouts: rollouts_sha256 is the sha256 of nothing. Run in
// the eval job, it names the job's GPU (JobGPU).
func ContaminatedRecord(c ContaminationCheck, slurmJobID, weightsSHA256, wandbURL string) (record.Eval, error) {
	if !c.Report.Contaminated {
		return record.Eval{}, fmt.Errorf("evaluate: the patch is not contaminated: score its rollouts")
	}
	ev := record.Eval{
		Completed: 1, WandbURL: wandbURL, SlurmJobID: slurmJobID, WeightsSHA256: weightsSHA256,
		RolloutsSHA256: sha256Hex(nil), Problems: record.Problems, SamplesPerProblem: record.SamplesPerProblem,
		PerQuestionCorrect: make([]int, record.Problems),
	}
	c.Bind(&ev)
	ev.SetGPU(JobGPU(context.Background(), nil))
	if err := ev.Validate(); err != nil {
		return record.Eval{}, fmt.Errorf("evaluate: built an invalid record: %w", err)
	}
	return ev, nil
}

// readBounded reads a regular file of at most max bytes, through one
// descriptor.
func readBounded(path string, max int64) ([]byte, error) {
	// O_NONBLOCK: opening a FIFO planted at the path must not hang the
	// eval job; the mode check below then refuses it.
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readOpened(f, path, max)
}

// readBoundedIn is readBounded for a name inside root (no escape by "..",
// an absolute path or a symbolic link).
func readBoundedIn(root *os.Root, name string, max int64) ([]byte, error) {
	f, err := root.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readOpened(f, name, max)
}

func readOpened(f *os.File, path string, max int64) ([]byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, fi.Mode().Type())
	}
	b, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if int64(len(b)) > max {
		return nil, fmt.Errorf("%s: more than %d bytes", path, max)
	}
	return b, nil
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}
