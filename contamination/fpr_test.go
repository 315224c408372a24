package contamination

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"
)

// The false-positive measurement: ordinary files found on this machine,
// each turned into an "added file" patch, must all be clean.

type corpusSource struct {
	name  string
	roots []string // existing roots (globs expanded)
	exts  []string
	cap   int
	skip  func(path string) bool
	// evaluator: the source is an eval tool (this repository), which names
	// the eval set by design: its KindName findings are counted apart
	// (st.named), not as false positives of a training patch
	evaluator bool
}

const (
	maxCorpusFileBytes = 1 << 20
	minCorpusPatches   = 300
)

var corpusExts = []string{".py", ".go", ".md", ".yaml", ".yml", ".txt", ".json", ".tex", ".rst"}

func globDirs(patterns ...string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range patterns {
		ms, _ := filepath.Glob(p)
		sort.Strings(ms)
		for _, m := range ms {
			if st, err := os.Stat(m); err == nil && st.IsDir() && !seen[m] {
				seen[m] = true
				out = append(out, m)
			}
		}
	}
	return out
}

func goModCache() string {
	if v := os.Getenv("GOMODCACHE"); v != "" {
		return v
	}
	if out, err := exec.Command("go", "env", "GOMODCACHE").Output(); err == nil {
		if s := strings.TrimSpace(string(out)); s != "" {
			return s
		}
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, "go", "pkg", "mod")
}

func corpusSources() []corpusSource {
	home, _ := os.UserHomeDir()
	mod := goModCache()
	repo, _ := filepath.Abs("..")
	pyenv := filepath.Join(home, ".pyenv", "versions", "*", "lib", "python3*")
	site := []string{
		"/usr/lib/python3/dist-packages/%s", "/usr/local/lib/python3*/dist-packages/%s",
		"/usr/local/lib/python3*/site-packages/%s", pyenv + "/site-packages/%s",
	}
	sitePkg := func(names ...string) []string {
		var pats []string
		for _, n := range names {
			for _, s := range site {
				pats = append(pats, fmt.Sprintf(s, n))
			}
		}
		return globDirs(pats...)
	}
	notSite := func(p string) bool {
		return strings.Contains(p, "site-packages") || strings.Contains(p, "dist-packages")
	}
	return []corpusSource{
		{name: "go-modcache-x", roots: globDirs(mod + "/golang.org/x/*"), exts: corpusExts, cap: 700},
		{name: "go-modcache-other", roots: globDirs(mod+"/github.com/*", mod+"/google.golang.org/*", mod+"/gopkg.in/*", mod+"/sigs.k8s.io/*"), exts: corpusExts, cap: 500},
		{name: "python-stdlib", roots: globDirs("/usr/lib/python3.11", pyenv), exts: corpusExts, cap: 500, skip: notSite},
		{name: "python-dist-packages", roots: globDirs("/usr/lib/python3/dist-packages"), exts: corpusExts, cap: 400},
		{name: "sympy", roots: sitePkg("sympy"), exts: corpusExts, cap: 700},
		{name: "mpmath-networkx", roots: sitePkg("mpmath", "networkx"), exts: corpusExts, cap: 300},
		{name: "usr-share-doc", roots: globDirs("/usr/share/doc"), exts: corpusExts, cap: 300},
		{name: "tex", roots: globDirs("/usr/share", pyenv+"/site-packages/docutils", "/usr/lib/google-cloud-sdk"), exts: []string{".tex"}, cap: 50},
		{name: "this-repo", roots: []string{repo}, exts: corpusExts, cap: 300, evaluator: true, skip: func(p string) bool {
			// the package's own tests hold the stand-in problems' templates
			return strings.Contains(p, string(filepath.Separator)+"contamination"+string(filepath.Separator)) ||
				strings.Contains(p, string(filepath.Separator)+".git"+string(filepath.Separator))
		}},
	}
}

// files lists a source's files (sorted) and keeps an evenly spaced sample.
func (s corpusSource) files() []string {
	var all []string
	seen := map[string]bool{}
	for _, root := range s.roots {
		filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if d.IsDir() {
				if n := d.Name(); n == "__pycache__" || n == ".git" || n == "node_modules" {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() || seen[p] {
				return nil
			}
			ok := false
			for _, e := range s.exts {
				if strings.HasSuffix(p, e) {
					ok = true
				}
			}
			if !ok || (s.skip != nil && s.skip(p)) {
				return nil
			}
			if info, err := d.Info(); err != nil || info.Size() == 0 || info.Size() > maxCorpusFileBytes {
				return nil
			}
			seen[p] = true
			all = append(all, p)
			return nil
		})
	}
	sort.Strings(all)
	if len(all) <= s.cap {
		return all
	}
	out := make([]string, 0, s.cap)
	for i := 0; i < s.cap; i++ {
		out = append(out, all[i*len(all)/s.cap])
	}
	return out
}

// filePatch renders a file's content as an added-file patch.
func filePatch(name string, data []byte) []byte {
	data = bytes.TrimSuffix(data, []byte("\n"))
	lines := strings.Split(string(data), "\n")
	return []byte(addedFile(name, lines))
}

// fprStats accumulates the highest scores ordinary patches reach.
type fprStats struct {
	n             int
	flagged       []string
	maxOverlap    float64
	maxOverlapAt  string
	rawOverlap    float64
	rawOverlapAt  string
	rareOverlap   float64
	rareOverlapAt string
	maxRun        float64
	maxRunAt      string
	maxPair       float64
	maxPairAt     string
	maxAnswers    int
	maxAnswersAt  string
	maxColumn     int
	maxColumnAt   string
	named         []string // evaluator files naming the eval set
	// round three: files that are themselves opaque data (fonts, crypto
	// test vectors, Unicode tables, keys) refused by the readable-or-
	// refused rule, by design: counted apart from contamination findings
	dataRefused  []string
	maxOpaque    int64 // the most opaque bytes of a patch not refused
	maxOpaqueAt  string
	strictOpaque bool // this source's patches must not be refused either
	opts         Options
}

func (st *fprStats) add(t *testing.T, name string, patch []byte, problems []Problem, evaluator bool, strict ...bool) {
	strictOpaque := st.strictOpaque || len(strict) > 0 && strict[0]
	rep, sc := check(patch, problems, defaults, st.opts)
	st.n++
	var fp []Finding
	for _, f := range rep.Findings {
		if evaluator && f.Kind == KindName {
			st.named = append(st.named, name)
			continue
		}
		if f.Kind == KindOpaque && !strictOpaque {
			st.dataRefused = append(st.dataRefused, fmt.Sprintf("%s (%d bytes)", name, rep.OpaqueBytes))
			continue
		}
		fp = append(fp, f)
	}
	if findingOf(rep, KindOpaque) == nil && rep.OpaqueBytes > st.maxOpaque {
		st.maxOpaque, st.maxOpaqueAt = rep.OpaqueBytes, name
	}
	if len(fp) > 0 {
		st.flagged = append(st.flagged, name)
		for _, f := range fp {
			t.Logf("FALSE POSITIVE %s: %s lines %v", name, f.Detail, f.Lines)
		}
	}
	if sc.ColumnAnswers > st.maxColumn {
		st.maxColumn, st.maxColumnAt = sc.ColumnAnswers, name
	}
	for i := range sc.MaxOverlap {
		if sc.MaxRareOverlap[i] > st.rareOverlap {
			st.rareOverlap, st.rareOverlapAt = sc.MaxRareOverlap[i], fmt.Sprintf("%s (problem %s)", name, problems[i].ID)
		}
		if sc.RawOverlap[i] > st.rawOverlap {
			st.rawOverlap, st.rawOverlapAt = sc.RawOverlap[i], fmt.Sprintf("%s (problem %s)", name, problems[i].ID)
		}
		if sc.MaxOverlap[i] > st.maxOverlap {
			st.maxOverlap, st.maxOverlapAt = sc.MaxOverlap[i], fmt.Sprintf("%s (problem %s)", name, problems[i].ID)
		}
		if sc.MaxRun[i] > st.maxRun {
			st.maxRun, st.maxRunAt = sc.MaxRun[i], fmt.Sprintf("%s (problem %s, %d words)", name, problems[i].ID, sc.MaxRunWords[i])
		}
		if sc.MaxPairOverlap[i] > st.maxPair {
			st.maxPair, st.maxPairAt = sc.MaxPairOverlap[i], fmt.Sprintf("%s (problem %s)", name, problems[i].ID)
		}
	}
	if sc.AnswersFound > st.maxAnswers {
		st.maxAnswers, st.maxAnswersAt = sc.AnswersFound, name
	}
}

func (st *fprStats) log(t *testing.T, label string) {
	t.Logf("%s: opaque: the most opaque bytes of a patch not refused %d at %s; data files refused as unreadable (by design, not counted as false positives) %d: %v",
		label, st.maxOpaque, st.maxOpaqueAt, len(st.dataRefused), st.dataRefused)
	t.Logf("%s: %d/%d flagged; highest overlap %.3f at %s (%.3f at %s counting stock phrases; %.3f at %s with %d rare n-grams); longest run %.3f of a problem at %s; highest pair overlap %.3f at %s; most answers in a window %d at %s; most answers in one column %d at %s; evaluator files naming the set (not counted) %d",
		label, len(st.flagged), st.n, st.maxOverlap, st.maxOverlapAt, st.rawOverlap, st.rawOverlapAt, st.rareOverlap, st.rareOverlapAt, defaults.PairMinRare, st.maxRun, st.maxRunAt, st.maxPair, st.maxPairAt, st.maxAnswers, st.maxAnswersAt, st.maxColumn, st.maxColumnAt, len(st.named))
}

// runCorpus checks every corpus file against problems.
func runCorpus(t *testing.T, problems []Problem, budget time.Duration) *fprStats {
	t.Helper()
	total := &fprStats{}
	start := time.Now()
	var seenFiles []string
	for _, src := range corpusSources() {
		if len(src.roots) == 0 {
			t.Logf("source %s: not on this machine, skipped", src.name)
			continue
		}
		if raceEnabled {
			src.cap = (src.cap + 2) / 3
		}
		st := &fprStats{}
		for _, p := range src.files() {
			if time.Since(start) > budget {
				t.Logf("time budget %v reached", budget)
				break
			}
			data, err := os.ReadFile(p)
			if err != nil {
				continue
			}
			patch := filePatch(strings.TrimPrefix(p, "/"), data)
			st.add(t, p, patch, problems, src.evaluator, src.evaluator)
			total.add(t, p, patch, problems, src.evaluator, src.evaluator)
			if !src.evaluator {
				seenFiles = append(seenFiles, p)
			}
		}
		st.log(t, "source "+src.name)
	}
	// generated ordinary math training text, as JSONL and as prose
	r := rand.New(rand.NewPCG(7, 7))
	st := &fprStats{}
	for i := 0; i < 60; i++ {
		items := ordinaryMath(r, 50)
		var lines []string
		if i%2 == 0 {
			for _, it := range items {
				lines = append(lines, jsonRow("question", it, "answer", fmt.Sprint(r.IntN(1000))))
			}
		} else {
			for _, it := range items {
				lines = append(lines, strings.Split(it, "\n")...)
				lines = append(lines, "")
			}
		}
		name := fmt.Sprintf("generated/math-%02d.jsonl", i)
		patch := []byte(addedFile(name, lines))
		st.add(t, name, patch, problems, false, true)
		total.add(t, name, patch, problems, false, true)
	}
	st.log(t, "source generated-math")
	// round two: ordinary files in the encoded forms the checker now reads
	// (a GIT binary patch of the file, of its gzip, of a zip holding it,
	// and the file as a wrapped base64 string in code)
	st = &fprStats{}
	const encodedCap = 240
	for i := 0; i < encodedCap && len(seenFiles) > 0; i++ {
		p := seenFiles[i*len(seenFiles)/encodedCap]
		data, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		name := strings.TrimPrefix(p, "/")
		var patch []byte
		switch i % 4 {
		case 0:
			patch = binarySectionPatch(name, data)
		case 1:
			patch = binarySectionPatch(name+".gz", gz(data))
		case 2:
			patch = binarySectionPatch(name+".zip", zipOf(filepath.Base(name), data))
		case 3:
			patch = []byte(addedFile(name+".py", append(append([]string{`BLOB = """`}, wrap76(base64.StdEncoding.EncodeToString(data))...), `"""`)))
		}
		label := fmt.Sprintf("encoded-%d:%s", i%4, p)
		st.add(t, label, patch, problems, false)
		total.add(t, label, patch, problems, false)
	}
	st.log(t, "source encoded-forms")
	total.log(t, "ALL")
	return total
}

func TestFalsePositiveCorpus(t *testing.T) {
	budget := 60 * time.Second
	if testing.Short() {
		budget = 15 * time.Second
	}
	st := runCorpus(t, standInProblems(), budget)
	if len(st.flagged) > 0 {
		t.Errorf("%d of %d ordinary patches flagged: %v", len(st.flagged), st.n, st.flagged)
	}
	if st.n < minCorpusPatches {
		t.Fatalf("only %d ordinary patches could be built here; want at least %d", st.n, minCorpusPatches)
	}
	t.Logf("FPR %d/%d", len(st.flagged), st.n)
}
