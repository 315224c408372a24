package contamination

import (
	"fmt"
	"strconv"
)

// evalSetNames are the eval set's names as lexer tokens: an added line that
// names the set (a config's dataset_name, a loader's id, a Hugging Face
// dataset id, a file name) trains on it as surely as a copy does when the
// data is reachable, so naming it is a finding (KindName). The lexer splits
// letters from digits and drops punctuation, so ["aime", "2025"] covers
// "AIME2025", "aime_2025", "AIME-2025", "AIME 2025", "opencompass/AIME2025",
// "MathArena/aime_2025", "yentinglin/aime_2025" and "aime2025.jsonl";
// ["aime", "25"] covers "aime25", "AIME-25", "math-ai/aime25" and
// "AIME'25".
var evalSetNames = [][]string{
	{"aime", "2025"},
	{"aime", "25"},
	{"2025", "aime"}, // "2025 AIME I", "the 2025 AIME"
	{"aime", "i", "2025"},
	{"aime", "ii", "2025"},
}

// maxNameSeq is the longest sequence of evalSetNames.
const maxNameSeq = 3

// nameState tracks the eval set's name in the added text.
type nameState struct {
	count   int
	lines   []int
	first   int    // line of the first mention
	excerpt string // that line, quoted and cut
}

// nameToken checks whether the tokens ending at the ring's newest slot
// spell one of evalSetNames.
func (c *checker) nameToken() {
	for _, seq := range evalSetNames {
		k := len(seq)
		if c.pos < int64(k) {
			continue
		}
		ok := true
		for i := 0; i < k; i++ {
			s := &c.ring[(c.pos-int64(k)+int64(i))&(ringSize-1)]
			if string(s.b[:s.n]) != seq[i] {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		n := &c.names
		n.count++
		if n.count == 1 {
			n.first = c.line
			n.excerpt = excerpt(c.text)
		}
		n.lines = appendLine(n.lines, c.line)
		return
	}
}

// excerpt quotes a line of the patch for a finding's detail: ASCII only,
// cut to 100 bytes.
func excerpt(b []byte) string {
	const max = 100
	cut := ""
	if len(b) > max {
		b, cut = b[:max], "..."
	}
	return strconv.QuoteToASCII(string(b)) + cut
}

func (c *checker) nameFinding() *Finding {
	n := &c.names
	if n.count == 0 {
		return nil
	}
	times := ""
	if n.count > 1 {
		times = fmt.Sprintf(" (%d mentions in %s)", n.count, lineRange(n.lines))
	}
	return &Finding{
		Kind: KindName, Lines: n.lines, Overlap: 1,
		Detail: fmt.Sprintf("the eval set is named in added line %d of the patch%s: %s%s",
			n.first, c.where(n.first), n.excerpt, times),
	}
}
