package contamination

import (
	"bytes"
	"errors"
	"fmt"
	"path"
	"strconv"
	"strings"
)

// Binary sections. `git diff --binary` writes a changed binary file (or any
// file git takes for binary, which .gitattributes decides) as a "GIT binary
// patch" section: a forward hunk ("literal N": the new content; "delta N":
// a git delta against the old content), zlib-deflated and base85-encoded,
// then a reverse hunk. `git apply` writes the forward hunk's result, so the
// checker decodes it and reads the result as added text; a section it
// cannot decode, or whose result it cannot rebuild exactly (a delta whose
// pristine base it has no copy of, or that does not match the index line's
// blob ids, as git apply requires), is refused (KindBinary).

// DefaultMaxDecoded bounds the bytes decoded from the binary sections of
// one patch: the bound of the patch itself (stages.MaxPatchBytes).
const DefaultMaxDecoded = 32 << 20

// Options are Check's inputs besides the patch and the problems.
type Options struct {
	// Pristine returns the pristine (unpatched) content of a file named by
	// its patch path ("NeMo-RL/x.bin", "recipe.yaml"): the base of a
	// binary delta. nil, or an error, means no base: such a delta is
	// refused.
	Pristine func(path string) ([]byte, error)
	// MaxDecoded bounds the bytes decoded from binary sections (0:
	// DefaultMaxDecoded); a patch beyond it is refused.
	MaxDecoded int64
	// MaxOpaque bounds the added bytes that read as nothing the check
	// reads (0: DefaultMaxOpaque); a patch beyond it is refused.
	MaxOpaque int64
}

// fileHeader is what the extended header of one file's diff says.
type fileHeader struct {
	oldPath, newPath string
	oldID, newID     string
	newFile          bool
	copyKind         string // "copy" or "rename" when the header says so
	copyLine         int    // its "copy from" / "rename from" line
}

type secHunk struct {
	line  int // patch line of "literal N" / "delta N"
	delta bool
	size  int64
	body  [][]byte
}

// binSection is one "GIT binary patch" section as read from the patch.
type binSection struct {
	line  int // patch line of "GIT binary patch"
	file  fileHeader
	hunks []secHunk
	err   string // a structural problem found while reading it
}

// name is the file a section patches, for details.
func (s *binSection) name() string {
	switch {
	case s.file.newPath != "":
		return s.file.newPath
	case s.file.oldPath != "":
		return s.file.oldPath
	}
	return "an unnamed file"
}

// headerLine reads one extended header line of a "diff --git" file into h.
func headerLine(l []byte, lineNo int, h *fileHeader) {
	s := string(l)
	switch {
	case strings.HasPrefix(s, "diff --git "):
		*h = fileHeader{}
		h.oldPath, h.newPath = gitHeaderPaths(s[len("diff --git "):])
	case strings.HasPrefix(s, "rename from "):
		h.oldPath = unquotePath(s[len("rename from "):], "")
		h.copyKind, h.copyLine = "rename", lineNo
	case strings.HasPrefix(s, "copy from "):
		h.oldPath = unquotePath(s[len("copy from "):], "")
		h.copyKind, h.copyLine = "copy", lineNo
	case strings.HasPrefix(s, "rename to "):
		h.newPath = unquotePath(s[len("rename to "):], "")
	case strings.HasPrefix(s, "copy to "):
		h.newPath = unquotePath(s[len("copy to "):], "")
	case strings.HasPrefix(s, "new file mode "):
		h.newFile = true
	case strings.HasPrefix(s, "index "):
		ids := strings.Fields(s[len("index "):])
		if len(ids) > 0 {
			if a, b, ok := strings.Cut(ids[0], ".."); ok {
				h.oldID, h.newID = a, b
			}
		}
	case strings.HasPrefix(s, "--- "):
		if p := unquotePath(strings.TrimSuffix(s[4:], "\t"), "a/"); p != "" && h.oldPath == "" {
			h.oldPath = p
		}
	case strings.HasPrefix(s, "+++ "):
		if p := unquotePath(strings.TrimSuffix(s[4:], "\t"), "b/"); p != "" && h.newPath == "" {
			h.newPath = p
		}
	}
}

// gitHeaderPaths splits the "a/P b/Q" of a "diff --git" line: C-quoted
// names, or, unquoted, the two halves of equal names (as git itself reads
// it when there is no rename).
func gitHeaderPaths(s string) (oldPath, newPath string) {
	if strings.HasPrefix(s, `"`) {
		q, rest, ok := cutQuoted(s)
		if !ok {
			return "", ""
		}
		return unquotePath(q, "a/"), unquotePath(strings.TrimPrefix(rest, " "), "b/")
	}
	if i := strings.Index(s, ` "`); i >= 0 {
		return unquotePath(s[:i], "a/"), unquotePath(s[i+1:], "b/")
	}
	if (len(s)-1)%2 == 0 {
		half := (len(s) - 1) / 2
		a, b := s[:half], s[half+1:]
		if s[half] == ' ' && strings.HasPrefix(a, "a/") && strings.HasPrefix(b, "b/") && a[2:] == b[2:] {
			return a[2:], b[2:]
		}
	}
	if i := strings.Index(s, " b/"); i >= 0 && strings.HasPrefix(s, "a/") {
		return s[2:i], s[i+3:]
	}
	return "", ""
}

// cutQuoted splits a leading C-quoted string off s.
func cutQuoted(s string) (quoted, rest string, ok bool) {
	for i := 1; i < len(s); i++ {
		switch s[i] {
		case '\\':
			i++
		case '"':
			return s[:i+1], s[i+1:], true
		}
	}
	return "", "", false
}

// unquotePath reads a path as git writes it (C-quoted when it holds special
// bytes), strips prefix ("a/", "b/") and cleans it; "" for /dev/null or a
// path that is not a clean relative one.
func unquotePath(s, prefix string) string {
	if strings.HasPrefix(s, `"`) {
		u, err := strconv.Unquote(s)
		if err != nil {
			return ""
		}
		s = u
	}
	if s == "/dev/null" {
		return ""
	}
	s = strings.TrimPrefix(s, prefix)
	if s == "" || strings.HasPrefix(s, "/") || path.Clean(s) != s || s == ".." || strings.HasPrefix(s, "../") {
		return ""
	}
	return s
}

// isFullID tells a full (40 hex digit) git blob id from an abbreviated one.
func isFullID(id string) bool {
	if len(id) != 40 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if hexVal(id[i]) < 0 || (id[i] >= 'A' && id[i] <= 'F') {
			return false
		}
	}
	return true
}

func isZeroID(id string) bool { return id != "" && strings.Trim(id, "0") == "" }

// errNoBase is a delta the checker has no base for.
var errNoBase = errors.New("no pristine copy of the file it applies to")

// decodeSection rebuilds what git apply would write for a binary section:
// the forward hunk's result (and, for a delta, the bytes it inserts) (decoded, and for a delta applied to its
// base), checked against the index line's blob ids; the reverse hunk must
// decode too. budget bounds the bytes decoded.
func decodeSection(sec *binSection, o Options, budget int64) (out, inserted []byte, used int64, err error) {
	if sec.err != "" {
		return nil, nil, 0, errors.New(sec.err)
	}
	if len(sec.hunks) == 0 {
		return nil, nil, 0, errors.New("no literal or delta hunk")
	}
	f := sec.file
	if !(isFullID(f.newID) || isZeroID(f.newID)) || !(isFullID(f.oldID) || isZeroID(f.oldID)) {
		return nil, nil, 0, fmt.Errorf("its index line %q does not give full blob ids, as git apply requires of a binary patch", f.oldID+".."+f.newID)
	}
	fwd := sec.hunks[0]
	h, err := decodeBinaryHunk(fwd.delta, fwd.size, fwd.body, budget)
	if err != nil {
		return nil, nil, 0, fmt.Errorf("its %s hunk at line %d: %w", hunkKind(fwd.delta), fwd.line, err)
	}
	used = int64(len(h.Data))
	var base []byte
	newFile := f.newFile || isZeroID(f.oldID)
	if !newFile {
		if f.oldPath == "" {
			return nil, nil, used, errors.New("the diff header names no file it applies to")
		}
		if fwd.delta {
			if o.Pristine == nil {
				return nil, nil, used, fmt.Errorf("a delta against %s: %w", f.oldPath, errNoBase)
			}
			b, err := o.Pristine(f.oldPath)
			if err != nil {
				return nil, nil, used, fmt.Errorf("a delta against %s: %w (%v)", f.oldPath, errNoBase, err)
			}
			if id := gitBlobID(b); id != f.oldID {
				return nil, nil, used, fmt.Errorf("a delta against %s, whose pristine blob is %s, not the %s its index line names", f.oldPath, id, f.oldID)
			}
			base = b
		}
	}
	out = h.Data
	if fwd.delta {
		inserted, _, _ = deltaInserts(h.Data, int64(len(base)), budget-used)
		out, err = applyGitDelta(base, h.Data, budget-used)
		if err != nil {
			return nil, nil, used, fmt.Errorf("its delta hunk at line %d: %w", fwd.line, err)
		}
		used += int64(len(out))
	}
	if isZeroID(f.newID) {
		if len(out) != 0 {
			return nil, nil, used, fmt.Errorf("it deletes the file but its forward hunk holds %d bytes", len(out))
		}
	} else if id := gitBlobID(out); id != f.newID {
		return nil, nil, used, fmt.Errorf("its result has blob id %s, not the %s its index line names", id, f.newID)
	}
	if len(sec.hunks) > 1 {
		rev := sec.hunks[1]
		rh, err := decodeBinaryHunk(rev.delta, rev.size, rev.body, budget-used)
		if err != nil {
			return nil, nil, used, fmt.Errorf("its reverse %s hunk at line %d: %w", hunkKind(rev.delta), rev.line, err)
		}
		used += int64(len(rh.Data))
		if rev.delta {
			if _, err := applyGitDelta(out, rh.Data, budget-used); err != nil {
				return nil, nil, used, fmt.Errorf("its reverse delta hunk at line %d: %w", rev.line, err)
			}
		}
	}
	return out, inserted, used, nil
}

func hunkKind(delta bool) string {
	if delta {
		return "delta"
	}
	return "literal"
}

// forEachLine calls f for each line of b (without its newline).
func forEachLine(b []byte, f func(l []byte)) {
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			f(b)
			return
		}
		f(b[:i])
		b = b[i+1:]
	}
}
