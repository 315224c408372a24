package contamination

import (
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ---- a small encoder: zlib + git base85, and a delta writer ----

// git85EncodeLine encodes 1..52 bytes as one data line of a binary hunk
// (git's encode_85 with the length byte in front).
func git85EncodeLine(chunk []byte) []byte {
	n := len(chunk)
	if n < 1 || n > 52 {
		panic("git85EncodeLine: bad chunk length " + strconv.Itoa(n))
	}
	var out []byte
	if n <= 26 {
		out = append(out, byte('A'+n-1))
	} else {
		out = append(out, byte('a'+n-27))
	}
	for i := 0; i < n; i += 4 {
		var acc uint32
		for j := 0; j < 4; j++ {
			acc <<= 8
			if i+j < n {
				acc |= uint32(chunk[i+j])
			}
		}
		var d [5]byte
		for k := 4; k >= 0; k-- {
			d[k] = git85Alphabet[acc%85]
			acc /= 85
		}
		out = append(out, d[:]...)
	}
	return out
}

// git85EncodeLines splits b into lines of 52 bytes, as git does.
func git85EncodeLines(b []byte) [][]byte {
	var lines [][]byte
	for len(b) > 0 {
		n := min(len(b), 52)
		lines = append(lines, git85EncodeLine(b[:n]))
		b = b[n:]
	}
	return lines
}

func zlibCompress(b []byte) []byte {
	var buf bytes.Buffer
	w := zlib.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

// encodeHunkLines gives the data lines of a hunk whose data is b.
func encodeHunkLines(b []byte) [][]byte { return git85EncodeLines(zlibCompress(b)) }

// hunkText is a whole hunk: header, data lines and the empty line.
func hunkText(delta bool, b []byte) string {
	var s strings.Builder
	if delta {
		fmt.Fprintf(&s, "delta %d\n", len(b))
	} else {
		fmt.Fprintf(&s, "literal %d\n", len(b))
	}
	for _, l := range encodeHunkLines(b) {
		s.Write(l)
		s.WriteByte('\n')
	}
	s.WriteByte('\n')
	return s.String()
}

func appendVarint(b []byte, v uint64) []byte {
	for v >= 0x80 {
		b = append(b, byte(v)|0x80)
		v >>= 7
	}
	return append(b, byte(v))
}

// deltaOps builds the ops of a git delta; delta() prefixes the header.
type deltaOps struct {
	ops []byte
	out int // result bytes the ops write
}

// copy appends a copy op of n (1..0xffffff) source bytes from off (< 2^32).
// n == 0x10000 is written with no size bytes, as git does.
func (d *deltaOps) copy(off, n int) *deltaOps {
	at := len(d.ops)
	cmd := byte(0x80)
	d.ops = append(d.ops, 0)
	for i := 0; i < 4; i++ {
		if c := byte(off >> (8 * i)); c != 0 {
			cmd |= 1 << i
			d.ops = append(d.ops, c)
		}
	}
	if n != 0x10000 {
		for i := 0; i < 3; i++ {
			if c := byte(n >> (8 * i)); c != 0 {
				cmd |= 0x10 << i
				d.ops = append(d.ops, c)
			}
		}
	}
	d.ops[at] = cmd
	d.out += n
	return d
}

// insert appends insert ops (of at most 127 bytes each) for b.
func (d *deltaOps) insert(b []byte) *deltaOps {
	for len(b) > 0 {
		n := min(len(b), 127)
		d.ops = append(d.ops, byte(n))
		d.ops = append(d.ops, b[:n]...)
		b = b[n:]
		d.out += n
	}
	return d
}

func (d *deltaOps) delta(srcSize int) []byte {
	h := appendVarint(nil, uint64(srcSize))
	h = appendVarint(h, uint64(d.out))
	return append(h, d.ops...)
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// ---- parsing binary sections out of a diff (test side) ----

type rawHunk struct {
	delta bool
	size  int64
	lines [][]byte
}

type binarySection struct {
	path         string
	oldID, newID string
	forward      rawHunk
	reverse      *rawHunk
}

// parseBinarySections finds the "GIT binary patch" sections of a diff
// written by git diff --binary.
func parseBinarySections(diff []byte) ([]binarySection, error) {
	lines := bytes.Split(diff, []byte("\n"))
	var out []binarySection
	path, oldID, newID := "", "", ""
	hunk := func(i int) (rawHunk, int, error) {
		if i >= len(lines) {
			return rawHunk{}, i, errors.New("missing hunk header")
		}
		delta, size, ok := parseBinaryHunkHeader(lines[i])
		if !ok {
			return rawHunk{}, i, fmt.Errorf("bad hunk header %q", lines[i])
		}
		h := rawHunk{delta: delta, size: size}
		for i++; ; i++ {
			if i >= len(lines) {
				return rawHunk{}, i, errors.New("hunk not ended by an empty line")
			}
			if len(lines[i]) == 0 {
				return h, i + 1, nil
			}
			h.lines = append(h.lines, lines[i])
		}
	}
	for i := 0; i < len(lines); i++ {
		l := string(lines[i])
		switch {
		case strings.HasPrefix(l, "diff --git "):
			f := strings.Fields(l)
			path, oldID, newID = strings.TrimPrefix(f[len(f)-1], "b/"), "", ""
		case strings.HasPrefix(l, "index "):
			f := strings.Fields(l)
			a, b, ok := strings.Cut(f[1], "..")
			if !ok {
				return nil, fmt.Errorf("bad index line %q", l)
			}
			oldID, newID = a, b
		case l == "GIT binary patch":
			fw, next, err := hunk(i + 1)
			if err != nil {
				return nil, fmt.Errorf("%s: forward hunk: %v", path, err)
			}
			s := binarySection{path: path, oldID: oldID, newID: newID, forward: fw}
			if next < len(lines) && (bytes.HasPrefix(lines[next], []byte("literal ")) || bytes.HasPrefix(lines[next], []byte("delta "))) {
				rv, n2, err := hunk(next)
				if err != nil {
					return nil, fmt.Errorf("%s: reverse hunk: %v", path, err)
				}
				s.reverse, next = &rv, n2
			}
			out = append(out, s)
			i = next - 1
		}
	}
	return out, nil
}

const testMaxSize = 64 << 20

// applyHunk gives the bytes a decoded hunk turns base into.
func applyHunk(h binaryHunk, base []byte) ([]byte, error) {
	if h.Delta {
		return applyGitDelta(base, h.Data, testMaxSize)
	}
	return h.Data, nil
}

func decodeRaw(h rawHunk) (binaryHunk, error) {
	return decodeBinaryHunk(h.delta, h.size, h.lines, testMaxSize)
}

const zeroID = "0000000000000000000000000000000000000000"

// ourApply does what git apply does with a patch's binary sections, given
// the preimages: it decodes both hunks of each section, checks the
// preimage's blob ID, applies the forward hunk and checks the result's blob
// ID. It returns the postimages (nil for a deletion).
func ourApply(diff []byte, old map[string][]byte) (map[string][]byte, error) {
	secs, err := parseBinarySections(diff)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for _, s := range secs {
		fw, err := decodeRaw(s.forward)
		if err != nil {
			return nil, fmt.Errorf("%s: forward: %w", s.path, err)
		}
		if s.reverse != nil {
			if _, err := decodeRaw(*s.reverse); err != nil {
				return nil, fmt.Errorf("%s: reverse: %w", s.path, err)
			}
		}
		base := old[s.path]
		if s.oldID != zeroID && gitBlobID(base) != s.oldID {
			return nil, fmt.Errorf("%s: preimage is %s, patch wants %s", s.path, gitBlobID(base), s.oldID)
		}
		if s.newID == zeroID {
			out[s.path] = nil
			continue
		}
		res, err := applyHunk(fw, base)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.path, err)
		}
		if id := gitBlobID(res); id != s.newID {
			return nil, fmt.Errorf("%s: result is %s, patch wants %s", s.path, id, s.newID)
		}
		out[s.path] = res
	}
	return out, nil
}

// ---- differential test against git ----

type gitRepo struct {
	t    *testing.T
	git  string
	dir  string
	home string
}

func (g *gitRepo) cmd(stdin []byte, args ...string) (stdout, stderr []byte, err error) {
	cfg := []string{"-c", "user.name=Binary Test", "-c", "user.email=binary@example.com",
		"-c", "init.defaultBranch=main", "-c", "core.autocrlf=false", "-c", "commit.gpgsign=false",
		"-c", "core.bigFileThreshold=512m"}
	c := exec.Command(g.git, append(cfg, args...)...)
	c.Dir = g.dir
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "GIT_") {
			env = append(env, e)
		}
	}
	c.Env = append(env, "HOME="+g.home, "XDG_CONFIG_HOME="+g.home, "GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL="+filepath.Join(g.home, "gitconfig"), "LC_ALL=C")
	if stdin != nil {
		c.Stdin = bytes.NewReader(stdin)
	}
	var o, e bytes.Buffer
	c.Stdout, c.Stderr = &o, &e
	err = c.Run()
	return o.Bytes(), e.Bytes(), err
}

func (g *gitRepo) run(stdin []byte, args ...string) []byte {
	g.t.Helper()
	o, e, err := g.cmd(stdin, args...)
	if err != nil {
		g.t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, e)
	}
	return o
}

func (g *gitRepo) write(name string, b []byte) {
	g.t.Helper()
	if err := os.WriteFile(filepath.Join(g.dir, name), b, 0o644); err != nil {
		g.t.Fatal(err)
	}
}

func TestBinaryAgainstGit(t *testing.T) {
	gitPath, err := exec.LookPath("git")
	if err != nil {
		t.Fatalf("git is needed for this test: %v", err)
	}
	tmp := t.TempDir()
	home := filepath.Join(tmp, "home")
	a := &gitRepo{t: t, git: gitPath, dir: filepath.Join(tmp, "a"), home: home}
	for _, d := range []string{home, a.dir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a.run(nil, "init", "-q", a.dir)

	r := rand.New(rand.NewPCG(7, 11))
	marker := func(tag string) []byte { return fmt.Appendf(nil, "%s-MARKER-%016x", tag, r.Uint64()) }

	// The base commit.
	// More than 0x10000 bytes, for room for a copy of that size below; runs
	// of NULs besides the random ones.
	base := randBytes(r, 66_000)
	for i := 0; i < len(base)-13; i += 997 {
		copy(base[i:], make([]byte, 13))
	}
	var jsonl []byte
	for i := range 120 {
		jsonl = fmt.Appendf(jsonl, "{\"id\": %d, \"statement\": \"Let x be %d and y be %d; find x*y.\", \"answer\": %d}\n", i, r.IntN(1000), r.IntN(1000), r.IntN(1e6))
	}
	old := map[string][]byte{
		"base.bin":  base,
		"old.jsonl": jsonl,
		"gone.bin":  randBytes(r, 3000),
		"small.bin": append([]byte{0}, randBytes(r, 100)...), // a NUL: git sees binary
	}
	for name, b := range old {
		a.write(name, b)
	}
	a.run(nil, "add", "-A")
	a.run(nil, "commit", "-q", "-m", "base")
	// b is a clone of the base commit only: it lacks the new blobs, so git
	// apply there really applies the hunks instead of finding the result in
	// the object store.
	b := &gitRepo{t: t, git: gitPath, dir: filepath.Join(tmp, "b"), home: home}
	a.run(nil, "clone", "-q", a.dir, b.dir)

	// The changes.
	baseMarker := marker("BASE")
	newBase := append([]byte(nil), base[:10_000]...)
	newBase = append(newBase, randBytes(r, 20)...)
	newBase = append(newBase, base[10_020:30_000]...)
	newBase = append(newBase, baseMarker...)
	newBase = append(newBase, base[30_000:40_000]...)
	newBase = append(newBase, base[40_100:]...)

	jsonlMarker := marker("JSONL")
	i := bytes.Index(jsonl[len(jsonl)/2:], []byte("\n")) + len(jsonl)/2 + 1
	newJSONL := append(append(append([]byte(nil), jsonl[:i]...), fmt.Appendf(nil, "{\"id\": 999, \"statement\": \"%s\", \"answer\": 1}\n", jsonlMarker)...), jsonl[i:]...)

	newBin := randBytes(r, 20_000)
	newBin[5] = 0
	newBin = append(newBin, "\x00\nThis is a text chunk inside a binary file: find the sum of 1 and 2.\nAnswer: 3\n"...)
	newBin = append(newBin, randBytes(r, 500)...)

	newText := []byte("{\"id\": \"p1\", \"statement\": \"Compute 2+2.\", \"answer\": \"4\"}\n{\"id\": \"p2\", \"statement\": \"Naïve café ✓\", \"answer\": \"ok\"}\n")

	cur := map[string][]byte{
		"base.bin":  newBase,
		"old.jsonl": newJSONL,
		"small.bin": append([]byte{0}, randBytes(r, 120)...),
		"new.bin":   newBin,
		"new.jsonl": newText,
	}
	for name, b := range cur {
		a.write(name, b)
	}
	a.run(nil, "rm", "-q", "gone.bin")
	if err := os.WriteFile(filepath.Join(a.dir, ".git", "info", "attributes"), []byte("*.jsonl -diff\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	a.run(nil, "add", "-A")

	// gitBlobID against git hash-object and git's own view of HEAD.
	for name, want := range cur {
		got := strings.TrimSpace(string(a.run(nil, "hash-object", name)))
		if id := gitBlobID(want); id != got {
			t.Errorf("gitBlobID(%s) = %s, git hash-object says %s", name, id, got)
		}
	}
	for name, want := range old {
		got := strings.TrimSpace(string(a.run(nil, "rev-parse", "HEAD:"+name)))
		if id := gitBlobID(want); id != got {
			t.Errorf("gitBlobID(HEAD:%s) = %s, git says %s", name, id, got)
		}
	}

	diff := a.run(nil, "diff", "--binary", "--cached")
	if !bytes.Contains(diff, []byte("\ndelta ")) {
		t.Fatalf("git wrote no delta hunk:\n%.2000s", diff)
	}
	secs, err := parseBinarySections(diff)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var literals, deltas int
	for _, s := range secs {
		seen[s.path] = true
		pre, post := old[s.path], cur[s.path]
		if s.reverse == nil {
			t.Errorf("%s: git wrote no reverse hunk", s.path)
		}
		if want := idOrZero(pre, s.path, old); s.oldID != want {
			t.Errorf("%s: index line preimage %s, gitBlobID gives %s", s.path, s.oldID, want)
		}
		if want := idOrZero(post, s.path, cur); s.newID != want {
			t.Errorf("%s: index line postimage %s, gitBlobID gives %s", s.path, s.newID, want)
		}
		for _, dir := range []struct {
			name     string
			h        *rawHunk
			from, to []byte
		}{{"forward", &s.forward, pre, post}, {"reverse", s.reverse, post, pre}} {
			if dir.h == nil {
				continue
			}
			h, err := decodeRaw(*dir.h)
			if err != nil {
				t.Errorf("%s %s: %v", s.path, dir.name, err)
				continue
			}
			if h.Delta != dir.h.delta || h.Size != dir.h.size || int64(len(h.Data)) != h.Size {
				t.Errorf("%s %s: hunk %v/%d with %d bytes, header said %v/%d", s.path, dir.name, h.Delta, h.Size, len(h.Data), dir.h.delta, dir.h.size)
			}
			got, err := applyHunk(h, dir.from)
			if err != nil {
				t.Errorf("%s %s: %v", s.path, dir.name, err)
				continue
			}
			if !bytes.Equal(got, dir.to) {
				t.Errorf("%s %s: decoded %d bytes (blob %s), want %d (blob %s)", s.path, dir.name, len(got), gitBlobID(got), len(dir.to), gitBlobID(dir.to))
			}
			if h.Delta {
				deltas++
				ins, copies, err := deltaInserts(h.Data, int64(len(dir.from)), testMaxSize)
				ins2, copies2, err2 := deltaInserts(h.Data, -1, testMaxSize)
				if err != nil || err2 != nil {
					t.Errorf("%s %s: deltaInserts: %v, %v", s.path, dir.name, err, err2)
				} else if !bytes.Equal(ins, ins2) || copies != copies2 || copies == 0 || len(ins) >= len(dir.to) {
					t.Errorf("%s %s: deltaInserts gave %d bytes, %d copies; without the base %d bytes, %d copies (result %d bytes)",
						s.path, dir.name, len(ins), copies, len(ins2), copies2, len(dir.to))
				}
				if _, _, err := deltaInserts(h.Data, int64(len(dir.from))+1, testMaxSize); err == nil {
					t.Errorf("%s %s: deltaInserts accepted the wrong source size", s.path, dir.name)
				}
				if dir.name == "forward" {
					for _, m := range [][]byte{baseMarker, jsonlMarker} {
						if bytes.Contains(dir.to, m) && !bytes.Contains(ins, m) {
							t.Errorf("%s: the delta's inserts lack the added %q", s.path, m)
						}
					}
				}
			} else {
				literals++
			}
		}
	}
	for name := range cur {
		if !seen[name] {
			t.Errorf("%s: no binary section in the diff", name)
		}
	}
	if !seen["gone.bin"] || len(secs) != len(cur)+1 {
		t.Errorf("%d binary sections, want %d", len(secs), len(cur)+1)
	}
	for _, s := range secs {
		switch s.path {
		case "base.bin":
			if !s.forward.delta {
				t.Errorf("base.bin: git wrote a literal, want a delta for a small change")
			}
		case "new.jsonl":
			if s.forward.delta {
				t.Errorf("new.jsonl: a delta for a new file")
			} else if h, err := decodeRaw(s.forward); err != nil || string(h.Data) != string(newText) {
				t.Errorf("new.jsonl (made binary by -diff): literal decodes to %q, %v; want %q", h.Data, err, newText)
			}
		}
	}
	t.Logf("git diff --binary: %d sections, %d literal and %d delta hunks decoded and compared", len(secs), literals, deltas)

	// What git apply writes, in the clone that lacks the new blobs, against
	// what we decode.
	ours, err := ourApply(diff, old)
	if err != nil {
		t.Fatalf("ourApply on git's own diff: %v", err)
	}
	patchFile := filepath.Join(tmp, "p.diff")
	applyCheck := func(patch []byte) (err error, stderr string) {
		if err := os.WriteFile(patchFile, patch, 0o644); err != nil {
			t.Fatal(err)
		}
		_, e, err := b.cmd(nil, "apply", "--cached", "--check", patchFile)
		return err, string(bytes.TrimSpace(e))
	}
	if err, e := applyCheck(diff); err != nil || e != "" {
		t.Fatalf("git apply --check of git's own diff: %v: %s", err, e)
	}

	// Corruptions both git apply and we must reject.
	dl := bytes.Split(diff, []byte("\n"))
	find := func(path string, reverse bool, nth int) int { // index in dl of a hunk's header (nth = 0) or data line nth
		in := ""
		for i, l := range dl {
			if bytes.HasPrefix(l, []byte("diff --git ")) {
				in = string(l[bytes.LastIndex(l, []byte(" b/"))+3:])
			}
			if in == path && string(l) == "GIT binary patch" {
				j := i + 1
				if reverse {
					for len(dl[j]) > 0 {
						j++
					}
					j++
				}
				return j + nth
			}
		}
		t.Fatalf("no section for %s", path)
		return 0
	}
	mutate := func(at int, f func([]byte) []byte) []byte {
		out := make([][]byte, len(dl))
		copy(out, dl)
		out[at] = f(append([]byte(nil), dl[at]...))
		return bytes.Join(out, []byte("\n"))
	}
	nextDigit := func(c byte) byte { return git85Alphabet[(strings.IndexByte(git85Alphabet, c)+1)%85] }
	headerPlus := func(l []byte) []byte {
		d, n, _ := parseBinaryHunkHeader(l)
		return []byte(map[bool]string{false: "literal ", true: "delta "}[d] + strconv.FormatInt(n+1, 10))
	}
	bad := []struct {
		name, path string
		patch      []byte
	}{
		{"literal digit", "new.bin", mutate(find("new.bin", false, 2), func(l []byte) []byte { l[7] = nextDigit(l[7]); return l })},
		{"delta digit", "base.bin", mutate(find("base.bin", false, 1), func(l []byte) []byte { l[3] = nextDigit(l[3]); return l })},
		{"delta size", "base.bin", mutate(find("base.bin", false, 0), headerPlus)},
		{"literal size", "small.bin", mutate(find("small.bin", false, 0), headerPlus)},
		{"reverse digit", "old.jsonl", mutate(find("old.jsonl", true, 1), func(l []byte) []byte { l[9] = nextDigit(l[9]); return l })},
		{"length byte", "new.jsonl", mutate(find("new.jsonl", false, 1), func(l []byte) []byte { l[0] = '0'; return l })},
		{"cut line", "new.bin", mutate(find("new.bin", false, 3), func(l []byte) []byte { return l[:len(l)-5] })},
		{"dropped line", "new.bin", mutate(find("new.bin", false, 3), func([]byte) []byte { return dl[find("new.bin", false, 4)] })},
	}
	exit0 := 0
	for _, c := range bad {
		// git apply reports a corrupt binary hunk, but (as of git 2.39) it
		// then stops reading the patch and applies the sections before it,
		// exiting 0 if they apply: so its message is the verdict here.
		gitErr, stderr := applyCheck(c.patch)
		if !strings.Contains(stderr, "corrupt binary patch") {
			t.Errorf("%s: git apply did not call the patch corrupt: %v: %s", c.name, gitErr, stderr)
		}
		if gitErr == nil {
			exit0++
		}
		_, ourErr := ourApply(c.patch, old)
		if ourErr == nil || !strings.HasPrefix(ourErr.Error(), c.path+": ") {
			t.Errorf("%s: ours: %v; want an error about %s", c.name, ourErr, c.path)
		}
	}
	t.Logf("%d corruptions rejected by git apply and by us (git apply exited 0 for %d of them, having applied the sections before the corrupt one)", len(bad), exit0)

	// Our encoder's hunks, as git apply sees them: a new file from a literal
	// and a change from a hand-made delta (with a 0x10000 copy).
	encBin := append(randBytes(r, 777), 0, 1, 2)
	encDelta := new(deltaOps).copy(0, 0x10000).insert([]byte("OUR-DELTA\x00")).copy(40_000, 9_000).copy(300, 1).insert(randBytes(r, 300))
	encBase, err := applyGitDelta(base, encDelta.delta(len(base)), testMaxSize)
	if err != nil {
		t.Fatal(err)
	}
	encPatch := "diff --git a/enc.bin b/enc.bin\nnew file mode 100644\nindex " + zeroID + ".." + gitBlobID(encBin) + "\nGIT binary patch\n" +
		hunkText(false, encBin) + hunkText(false, nil) +
		"diff --git a/base.bin b/base.bin\nindex " + gitBlobID(base) + ".." + gitBlobID(encBase) + " 100644\nGIT binary patch\n" +
		hunkText(true, encDelta.delta(len(base)))
	if err := os.WriteFile(patchFile, []byte(encPatch), 0o644); err != nil {
		t.Fatal(err)
	}
	b.run(nil, "apply", "--cached", patchFile)
	for name, want := range map[string][]byte{"enc.bin": encBin, "base.bin": encBase} {
		if got := b.run(nil, "cat-file", "blob", ":"+name); !bytes.Equal(got, want) {
			t.Errorf("git apply of our encoded %s wrote %d bytes, want %d", name, len(got), len(want))
		}
	}
	if got, err := ourApply([]byte(encPatch), old); err != nil || !bytes.Equal(got["enc.bin"], encBin) || !bytes.Equal(got["base.bin"], encBase) {
		t.Errorf("ourApply of our encoded patch: %v", err)
	}
	b.run(nil, "reset", "-q")

	// And git's diff, applied for real.
	if err := os.WriteFile(patchFile, diff, 0o644); err != nil {
		t.Fatal(err)
	}
	b.run(nil, "apply", "--cached", patchFile)
	for name, want := range cur {
		got := b.run(nil, "cat-file", "blob", ":"+name)
		if !bytes.Equal(got, want) || !bytes.Equal(ours[name], got) {
			t.Errorf("%s: git apply wrote %d bytes (blob %s), we decoded %d (blob %s), the file has %d",
				name, len(got), gitBlobID(got), len(ours[name]), gitBlobID(ours[name]), len(want))
		}
	}
	if _, _, err := b.cmd(nil, "cat-file", "-e", ":gone.bin"); err == nil {
		t.Errorf("gone.bin still in the index after git apply")
	}
	if g, ok := ours["gone.bin"]; !ok || g != nil {
		t.Errorf("ourApply: gone.bin not a deletion")
	}
}

func idOrZero(b []byte, name string, m map[string][]byte) string {
	if _, ok := m[name]; !ok {
		return zeroID
	}
	return gitBlobID(b)
}

// ---- table tests ----

func TestBinaryHunkHeader(t *testing.T) {
	good := []struct {
		line  string
		delta bool
		size  int64
	}{
		{"literal 0", false, 0},
		{"literal 123", false, 123},
		{"delta 5", true, 5},
		{"delta 5\n", true, 5},
		{"literal 007", false, 7},
		{"literal 9223372036854775807", false, 1<<63 - 1},
	}
	for _, c := range good {
		d, n, ok := parseBinaryHunkHeader([]byte(c.line))
		if !ok || d != c.delta || n != c.size {
			t.Errorf("parseBinaryHunkHeader(%q) = %v, %d, %v; want %v, %d, true", c.line, d, n, ok, c.delta, c.size)
		}
	}
	for _, line := range []string{
		"literal -1", "literal +1", "literal 1x", "literal 1 ", "literal  1", " literal 1", "literal 1\r",
		"delta", "delta ", "literal", "literal ", "Literal 1", "LITERAL 1", "deltas 1", "literal\t1", "literal 0x10",
		"literal 99999999999999999999", "literal 9223372036854775808", "literal 1\n\n", "", "GIT binary patch", "literal ١",
	} {
		if d, n, ok := parseBinaryHunkHeader([]byte(line)); ok {
			t.Errorf("parseBinaryHunkHeader(%q) = %v, %d, true; want a reject", line, d, n)
		}
	}
}

func TestBinaryHunkRoundTrip(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 4, 5, 25, 26, 27, 51, 52, 53, 104, 1000, 100_000} {
		for _, kind := range []string{"random", "zeros", "text"} {
			var data []byte
			switch kind {
			case "random":
				data = randBytes(r, n)
			case "zeros":
				data = make([]byte, n)
			case "text":
				data = []byte(strings.Repeat("find the sum; ", n/14+1)[:n])
			}
			lines := encodeHunkLines(data)
			for _, l := range lines {
				if len(l) > 66 {
					t.Fatalf("encoder wrote a %d-char line", len(l))
				}
			}
			for _, delta := range []bool{false, true} {
				h, err := decodeBinaryHunk(delta, int64(n), lines, int64(n))
				if err != nil || h.Delta != delta || h.Size != int64(n) || !bytes.Equal(h.Data, data) {
					t.Fatalf("%s %d delta=%v: got %v/%d/%d bytes, %v", kind, n, delta, h.Delta, h.Size, len(h.Data), err)
				}
			}
			// With newlines still on, as bytes.SplitAfter leaves them.
			nl := make([][]byte, len(lines))
			for i, l := range lines {
				nl[i] = append(append([]byte(nil), l...), '\n')
			}
			if h, err := decodeBinaryHunk(false, int64(n), nl, int64(n)); err != nil || !bytes.Equal(h.Data, data) {
				t.Fatalf("%s %d with newlines: %v", kind, n, err)
			}
			// The whole text, through the header parser.
			txt := strings.Split(hunkText(false, data), "\n")
			_, size, ok := parseBinaryHunkHeader([]byte(txt[0]))
			if !ok || size != int64(n) {
				t.Fatalf("header %q", txt[0])
			}
		}
	}
	// Base85 of every byte value at every position of a group.
	all := make([]byte, 256*4)
	for i := range all {
		all[i] = byte(i / 4)
	}
	var dec []byte
	for i, l := range git85EncodeLines(all) {
		var err error
		if dec, err = decodeGit85Line(dec, l, i+1); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(dec, all) {
		t.Fatal("base85 round trip of all byte values failed")
	}
	// Known values: git's base85 of 0xffffffff is "|NsC0", of 0 "00000".
	for want, line := range map[string]string{"\xff\xff\xff\xff": "D|NsC0", "\x00\x00\x00\x00": "D00000", "\x00": "A00000"} {
		got, err := decodeGit85Line(nil, []byte(line), 1)
		if err != nil || string(got) != want {
			t.Errorf("decode %q = %q, %v; want %q", line, got, err, want)
		}
		if enc := git85EncodeLine([]byte(want)); string(enc) != line && len(want) == 4 {
			t.Errorf("encode %q = %q, want %q", want, enc, line)
		}
	}
}

func TestBinaryHunkRejects(t *testing.T) {
	data := append([]byte(strings.Repeat("Let x be the answer to this problem. ", 40)+"\x00\x01\x02"), randBytes(rand.New(rand.NewPCG(5, 6)), 400)...)
	good := encodeHunkLines(data)
	if len(good) < 3 {
		t.Fatalf("want a hunk of several lines, got %d", len(good))
	}
	n := int64(len(data))
	with := func(i int, f func([]byte) []byte) [][]byte {
		out := make([][]byte, len(good))
		copy(out, good)
		out[i] = f(append([]byte(nil), good[i]...))
		return out
	}
	setAt := func(j int, c byte) func([]byte) []byte {
		return func(l []byte) []byte { l[j] = c; return l }
	}
	z := zlibCompress(data)
	badSum := append([]byte(nil), z...)
	badSum[len(badSum)-1] ^= 1
	cases := []struct {
		name    string
		size    int64
		max     int64
		lines   [][]byte
		wantErr string
	}{
		{"bad length char", n, n, with(1, setAt(0, '0')), "data line 2: bad length byte '0'"},
		{"length char '@'", n, n, with(0, setAt(0, '@')), "data line 1: bad length byte"},
		{"length char '['", n, n, with(0, setAt(0, '[')), "data line 1: bad length byte"},
		{"bad base85 char", n, n, with(2, setAt(7, '"')), "data line 3: bad base85 character '\"' at column 8"},
		{"bad base85 char ','", n, n, with(0, setAt(1, ',')), "data line 1: bad base85 character ','"},
		{"bad base85 char NUL", n, n, with(0, setAt(3, 0)), "data line 1: bad base85 character"},
		{"line too short", n, n, with(1, func(l []byte) []byte { return l[:len(l)-1] }), "data line 2: length byte 'z' declares 52 bytes, which take 65 base85 characters, but the line has 64"},
		{"line too long", n, n, with(1, func(l []byte) []byte { return append(l, '0') }), "data line 2: length byte"},
		{"length byte too small", n, n, with(0, setAt(0, 'u')), "data line 1: length byte 'u' declares 47 bytes, which take 60"},
		{"CRLF", n, n, with(0, func(l []byte) []byte { return append(l, '\r', '\n') }), "data line 1:"},
		{"empty line", n, n, append(append([][]byte{}, good[:1]...), append([][]byte{{}}, good[1:]...)...), "data line 2: empty"},
		{"overflow", 4, 4, [][]byte{[]byte("D|NsC1")}, "data line 1: base85 group \"|NsC1\" (columns 2-6) overflows 32 bits"},
		{"overflow ~~~~~", 4, 4, [][]byte{[]byte("D~~~~~")}, "overflows 32 bits"},
		{"overflow second group", 8, 8, [][]byte{[]byte("H00000~~~~~")}, "group \"~~~~~\" (columns 7-11) overflows"},
		{"size too big", n + 1, n + 10, good, fmt.Sprintf("inflates to %d bytes, the header declares %d", n, n+1)},
		{"size too small", n - 1, n, good, fmt.Sprintf("inflates to more than the %d bytes", n-1)},
		{"size zero", 0, n, good, "inflates to more than the 0 bytes"},
		{"size over max", n, n - 1, good, fmt.Sprintf("size %d exceeds the limit of %d bytes", n, n-1)},
		{"negative size", -1, n, good, "negative size"},
		{"no lines", 0, 10, nil, "inflating: unexpected EOF"},
		{"not zlib", 8, 8, git85EncodeLines([]byte("hello world!")), "inflating: zlib: invalid header"},
		{"truncated zlib", n, n, good[:len(good)-1], "inflating: unexpected EOF"},
		{"bad checksum", n, n, git85EncodeLines(badSum), "inflating: zlib: invalid checksum"},
		{"raw deflate", n, n, git85EncodeLines(z[2 : len(z)-4]), "inflating: "},
	}
	for _, c := range cases {
		h, err := decodeBinaryHunk(false, c.size, c.lines, c.max)
		if err == nil {
			t.Errorf("%s: decoded %d bytes, want an error", c.name, len(h.Data))
			continue
		}
		if !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: error %q, want it to contain %q", c.name, err, c.wantErr)
		}
		if h.Data != nil {
			t.Errorf("%s: data with an error", c.name)
		}
	}
	// Bytes after the end of the zlib stream are ignored, as by git's inflate_it.
	if h, err := decodeBinaryHunk(false, n, git85EncodeLines(append(append([]byte(nil), z...), "junk"...)), n); err != nil || !bytes.Equal(h.Data, data) {
		t.Errorf("trailing bytes after the zlib stream: %v", err)
	}
	// Padding bits of the last group are ignored, as by git's decode_85.
	pad := git85EncodeLines(z)
	last := pad[len(pad)-1]
	if (hunkLineLen(last[0]))%4 != 0 {
		last = append([]byte(nil), last...)
		last[len(last)-1] = git85Alphabet[(strings.IndexByte(git85Alphabet, last[len(last)-1])+1)%85]
		if last[len(last)-1] != '0' { // a carry could overflow or change real bytes
			pad[len(pad)-1] = last
			if h, err := decodeBinaryHunk(false, n, pad, n); err != nil || !bytes.Equal(h.Data, data) {
				t.Errorf("changed padding: %v", err)
			}
		}
	}
}

func TestBinaryZipBomb(t *testing.T) {
	bomb := zlibCompress(make([]byte, 10<<20))
	lines := git85EncodeLines(bomb)
	for _, c := range []struct {
		size, max int64
	}{{1, 1}, {1, 1 << 30}, {0, 100}, {1 << 20, 1 << 20}} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		start := time.Now()
		h, err := decodeBinaryHunk(false, c.size, lines, c.max)
		el := time.Since(start)
		runtime.ReadMemStats(&after)
		if err == nil {
			t.Fatalf("size %d: a 10 MB bomb decoded to %d bytes", c.size, len(h.Data))
		}
		if !strings.Contains(err.Error(), "inflates to more than") {
			t.Errorf("size %d: error %q", c.size, err)
		}
		alloc := after.TotalAlloc - before.TotalAlloc
		if limit := uint64(c.size)*3 + 1<<20; alloc > limit {
			t.Errorf("size %d: decoding the bomb allocated %d bytes (limit %d)", c.size, alloc, limit)
		}
		if el > 5*time.Second {
			t.Errorf("size %d: decoding the bomb took %v", c.size, el)
		}
		t.Logf("bomb declared %d: rejected in %v, %d bytes allocated", c.size, el, alloc)
	}
}

func TestApplyGitDelta(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	base := randBytes(r, 70_000)
	d := new(deltaOps).copy(2, 5).insert([]byte("XYZ")).copy(0, 0x10000).copy(66_000, 4000).copy(0x1_01_02, 1).copy(256, 256).insert(bytes.Repeat([]byte{'q'}, 300))
	want := append(append(append(append(append(append(append([]byte(nil), base[2:7]...), "XYZ"...), base[:0x10000]...), base[66_000:70_000]...), base[0x10102]), base[256:512]...), bytes.Repeat([]byte{'q'}, 300)...)
	delta := d.delta(len(base))
	got, err := applyGitDelta(base, delta, int64(len(want)))
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("applyGitDelta: %d bytes, %v; want %d bytes", len(got), err, len(want))
	}
	ins, copies, err := deltaInserts(delta, int64(len(base)), int64(len(want)))
	if err != nil || copies != 5 || string(ins) != "XYZ"+strings.Repeat("q", 300) {
		t.Errorf("deltaInserts = %q, %d, %v", ins, copies, err)
	}
	if _, err := applyGitDelta(base, delta, int64(len(want))-1); err == nil || !strings.Contains(err.Error(), "exceeds the limit") {
		t.Errorf("result over maxSize: %v", err)
	}

	// Random deltas against what they should produce.
	for iter := range 300 {
		src := randBytes(r, r.IntN(3000))
		var ops deltaOps
		var exp, expIns []byte
		copies := 0
		for range r.IntN(20) {
			if len(src) > 0 && r.IntN(2) == 0 {
				off := r.IntN(len(src))
				n := 1 + r.IntN(len(src)-off)
				ops.copy(off, n)
				exp = append(exp, src[off:off+n]...)
				copies++
			} else {
				b := randBytes(r, 1+r.IntN(300))
				ops.insert(b)
				exp = append(exp, b...)
				expIns = append(expIns, b...)
			}
		}
		dl := ops.delta(len(src))
		got, err := applyGitDelta(src, dl, int64(len(exp)))
		if len(dl) < 4 {
			if err == nil {
				t.Fatalf("iter %d: a %d-byte delta was accepted", iter, len(dl))
			}
			continue
		}
		if err != nil || !bytes.Equal(got, exp) {
			t.Fatalf("iter %d: %v", iter, err)
		}
		ins, c, err := deltaInserts(dl, -1, int64(len(exp)))
		if err != nil || c != copies || !bytes.Equal(ins, expIns) {
			t.Fatalf("iter %d: deltaInserts %d bytes, %d copies, %v; want %d, %d", iter, len(ins), c, err, len(expIns), copies)
		}
	}
}

func TestApplyGitDeltaRejects(t *testing.T) {
	base := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	hdr := func(src, dst int) []byte { return appendVarint(appendVarint(nil, uint64(src)), uint64(dst)) }
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	ok := new(deltaOps).copy(3, 4).insert([]byte("hi")).delta(len(base))
	if got, err := applyGitDelta(base, ok, 100); err != nil || string(got) != "3456hi" {
		t.Fatalf("valid delta: %q, %v", got, err)
	}
	cases := []struct {
		name    string
		delta   []byte
		max     int64
		wantErr string
	}{
		{"wrong source size", new(deltaOps).copy(3, 4).insert([]byte("hi")).delta(len(base) + 1), 100, "source size 37, but the base has 36 bytes"},
		{"source size zero", new(deltaOps).insert([]byte("hi")).delta(0), 100, "source size 0, but the base has 36"},
		{"copy out of range", new(deltaOps).copy(30, 7).delta(len(base)), 100, "copies source bytes [30, 37) of a 36-byte source"},
		{"copy offset out of range", new(deltaOps).copy(1<<24, 1).delta(len(base)), 100, "copies source bytes [16777216, 16777217)"},
		{"copy of 0x10000", new(deltaOps).copy(0, 0x10000).delta(len(base)), 1 << 20, "copies source bytes [0, 65536)"},
		{"op byte 0", cat(hdr(len(base), 2), []byte{0, 'h', 'i'}), 100, "unexpected op byte 0 at byte 2"},
		{"truncated insert", cat(hdr(len(base), 5), []byte{5, 'a', 'b'}), 100, "insert op at byte 2 of 5 bytes truncated (2 left)"},
		{"truncated copy", cat(hdr(len(base), 5), []byte{0x91, 3}), 100, "copy op at byte 2 truncated"},
		{"insert past result", cat(hdr(len(base), 1), []byte{2, 'a', 'b'}), 100, "writes 1 bytes past the declared result size 1"},
		{"copy past result", cat(hdr(len(base), 3), []byte{0x90, 4}), 100, "writes 1 bytes past the declared result size 3"},
		{"result short", cat(hdr(len(base), 9), []byte{0x90, 4, 2, 'a', 'b'}), 100, "ops write 6 bytes, the header declares 9"},
		{"no ops", hdr(len(base), 30000), 1 << 20, "ops write 0 bytes, the header declares 30000"},
		{"result over max", cat(hdr(len(base), 101), []byte{0x90, 4}), 100, "result size 101 exceeds the limit of 100"},
		{"huge result", cat(hdr(len(base), 1<<62), []byte{0x90, 4}), 1 << 40, "exceeds the limit"},
		{"too short", []byte{36, 0, 0}, 100, "shorter than git's minimum of 4"},
		{"empty", nil, 100, "shorter than git's minimum"},
		{"truncated source size", []byte{0xa4, 0x80, 0x80, 0x80}, 100, "truncated source size"},
		{"truncated result size", []byte{36, 0x80, 0x80, 0x80}, 100, "truncated result size"},
		{"varint overflow", cat([]byte{36}, bytes.Repeat([]byte{0xff}, 9), []byte{0x01}), 100, "result size does not fit in 63 bits"},
		{"varint too long", cat([]byte{36}, bytes.Repeat([]byte{0x80}, 10), []byte{0}), 100, "result size longer than 10 bytes"},
	}
	for _, c := range cases {
		got, err := applyGitDelta(base, c.delta, c.max)
		if err == nil {
			t.Errorf("%s: applied to %q, want an error", c.name, got)
			continue
		}
		if !strings.Contains(err.Error(), c.wantErr) {
			t.Errorf("%s: error %q, want it to contain %q", c.name, err, c.wantErr)
		}
		if got != nil {
			t.Errorf("%s: result with an error", c.name)
		}
		_, _, ierr := deltaInserts(c.delta, int64(len(base)), c.max)
		if ierr == nil || ierr.Error() != err.Error() {
			t.Errorf("%s: deltaInserts error %v, applyGitDelta's %v", c.name, ierr, err)
		}
	}
	// Without the base, copies are checked against the declared source size.
	if _, _, err := deltaInserts(new(deltaOps).copy(30, 7).delta(len(base)), -1, 100); err == nil || !strings.Contains(err.Error(), "of a 36-byte source") {
		t.Errorf("deltaInserts without the base: %v", err)
	}
	if ins, c, err := deltaInserts(new(deltaOps).copy(30, 6).insert([]byte("new")).delta(len(base)), -1, 100); err != nil || string(ins) != "new" || c != 1 {
		t.Errorf("deltaInserts without the base: %q, %d, %v", ins, c, err)
	}
	// A 63-bit varint that fits is read.
	if _, err := applyGitDelta(base, cat(hdr(len(base), 1<<63-1), []byte{1, 'a'}), 1<<62); err == nil || !strings.Contains(err.Error(), "result size 9223372036854775807 exceeds") {
		t.Errorf("largest varint: %v", err)
	}
}

func TestGitBlobID(t *testing.T) {
	for in, want := range map[string]string{
		"":              "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391", // git's empty blob
		"hello world\n": "3b18e512dba79e4c8300dd08aeb37f8e728b8dad",
		"\x00":          "f76dd238ade08917e6712764a16a22005a50573d",
	} {
		if got := gitBlobID([]byte(in)); got != want {
			t.Errorf("gitBlobID(%q) = %s, want %s", in, got, want)
		}
	}
}

// ---- fuzz targets ----

func FuzzDecodeBinaryHunk(f *testing.F) {
	f.Add([]byte(hunkText(false, []byte("hello, world\x00"))), int64(100))
	f.Add([]byte(hunkText(true, new(deltaOps).copy(0, 3).insert([]byte("xy")).delta(5))), int64(100))
	f.Add([]byte(hunkText(false, nil)), int64(0))
	f.Add([]byte(hunkText(false, bytes.Repeat([]byte("ab"), 500))), int64(999))
	f.Add([]byte("literal 1\n"+string(bytes.Join(git85EncodeLines(zlibCompress(make([]byte, 100_000))), []byte("\n")))+"\n\n"), int64(1<<16))
	f.Add([]byte("literal 4\nD|NsC1\n\n"), int64(8))
	f.Add([]byte("delta 12\nzzzzz\n\n"), int64(8))
	f.Add([]byte("literal 0\nHcmV?d00001\n\n"), int64(8))
	f.Fuzz(func(t *testing.T, text []byte, maxSize int64) {
		maxSize = (maxSize%(1<<16) + 1<<16) % (1 << 16)
		lines := bytes.Split(text, []byte("\n"))
		delta, size, ok := parseBinaryHunkHeader(lines[0])
		if ok {
			want := "literal "
			if delta {
				want = "delta "
			}
			if !strings.HasPrefix(string(lines[0]), want) {
				t.Fatalf("header %q parsed as delta=%v", lines[0], delta)
			}
		} else {
			size = int64(len(text))
		}
		data := lines[1:]
		for i, l := range data {
			if len(l) == 0 {
				data = data[:i]
				break
			}
		}
		h, err := decodeBinaryHunk(delta, size, data, maxSize)
		if err != nil {
			if h.Data != nil {
				t.Fatal("data with an error")
			}
			return
		}
		if h.Size != size || int64(len(h.Data)) != size || size > maxSize || h.Delta != delta {
			t.Fatalf("hunk %v/%d with %d bytes for header %v/%d, maxSize %d", h.Delta, h.Size, len(h.Data), delta, size, maxSize)
		}
		// Re-encoded, it decodes the same.
		h2, err := decodeBinaryHunk(delta, size, encodeHunkLines(h.Data), maxSize)
		if err != nil || !bytes.Equal(h2.Data, h.Data) {
			t.Fatalf("re-encoded hunk: %v", err)
		}
		if delta {
			if ins, _, err := deltaInserts(h.Data, -1, maxSize); err == nil && int64(len(ins)) > maxSize {
				t.Fatalf("%d inserted bytes over maxSize %d", len(ins), maxSize)
			}
		}
	})
}

func FuzzApplyGitDelta(f *testing.F) {
	base := []byte("0123456789abcdefghijklmnopqrstuvwxyz")
	// rep repeats the base (up to 128 KiB), for bases over 0x10000 bytes
	// without large inputs, which the fuzzer minimizes slowly.
	f.Add(base, new(deltaOps).copy(3, 4).insert([]byte("hi")).delta(len(base)), int64(100), uint16(0))
	f.Add(base, new(deltaOps).copy(0, 0x10000).delta(len(base)), int64(1<<20), uint16(0))
	f.Add(base, new(deltaOps).insert(bytes.Repeat([]byte("z"), 200)).copy(35, 1).delta(len(base)), int64(1000), uint16(0))
	f.Add(base, []byte{36, 5, 0, 1, 2}, int64(10), uint16(0))
	f.Add([]byte{}, []byte{0, 2, 2, 'a', 'b'}, int64(10), uint16(0))
	f.Add([]byte{0, 0}, new(deltaOps).copy(0x1_02_03, 0x1_00).copy(0, 0x10000).delta(70_000), int64(1<<20), uint16(34_999))
	f.Add(base, new(deltaOps).copy(0x1_02_03, 0x1_00).copy(0, 0x10000).copy(36*2000-7, 7).delta(36*2000), int64(1<<20), uint16(1999))
	f.Add(base, []byte{36, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x80}, int64(1<<20), uint16(0))
	f.Fuzz(func(t *testing.T, base, delta []byte, maxSize int64, rep uint16) {
		maxSize = (maxSize%(1<<20) + 1<<20) % (1 << 20)
		if rep > 0 && len(base) > 0 && len(base)*(int(rep)+1) <= 1<<17 {
			base = bytes.Repeat(base, int(rep)+1)
		}
		out, err := applyGitDelta(base, delta, maxSize)
		ins, copies, ierr := deltaInserts(delta, int64(len(base)), maxSize)
		if (err == nil) != (ierr == nil) {
			t.Fatalf("applyGitDelta: %v; deltaInserts: %v", err, ierr)
		}
		if err != nil {
			if out != nil || ins != nil || copies != 0 {
				t.Fatal("results with an error")
			}
			return
		}
		if int64(len(out)) > maxSize {
			t.Fatalf("result of %d bytes over maxSize %d", len(out), maxSize)
		}
		if len(ins) > len(out) || (copies == 0 && !bytes.Equal(ins, out)) {
			t.Fatalf("%d inserted bytes, %d copies, result %d bytes", len(ins), copies, len(out))
		}
		ins2, copies2, err := deltaInserts(delta, -1, maxSize)
		if err != nil || !bytes.Equal(ins, ins2) || copies != copies2 {
			t.Fatalf("deltaInserts without the base: %v", err)
		}
		// The result is the delta's declared result size.
		src, pos, _ := deltaVarint(delta, 0, "")
		dst, _, _ := deltaVarint(delta, pos, "")
		if src != int64(len(base)) || dst != int64(len(out)) {
			t.Fatalf("header %d/%d, base %d, result %d", src, dst, len(base), len(out))
		}
	})
}

func TestBinaryInflateLimited(t *testing.T) {
	src := randBytes(rand.New(rand.NewPCG(8, 9)), 100_000)
	for _, c := range []struct {
		size        int64
		deflatedLen int
		wantLen     int
	}{
		{100_000, 0, 100_000}, // the hint (1024) is too small: the buffer grows
		{50_000, 0, 50_001},   // stops one byte past size
		{100_000, 1 << 20, 100_000},
		{0, 0, 1},
	} {
		data, err := inflateLimited(bytes.NewReader(src), c.size, c.deflatedLen)
		if err != nil || len(data) != c.wantLen || !bytes.Equal(data, src[:c.wantLen]) {
			t.Errorf("size %d: %d bytes, %v; want %d", c.size, len(data), err, c.wantLen)
		}
		if int64(cap(data)) > c.size+1 {
			t.Errorf("size %d: buffer of %d bytes, over size+1", c.size, cap(data))
		}
	}
}
