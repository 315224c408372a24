package contamination

import (
	"fmt"
	"strconv"
)

// Answers per record (KindAnswers, by column). An answer key written as
// records ({year, exam, idx, points, answer} rows, CSV rows, YAML maps)
// puts several other numbers between two answers, so a window over all
// numbers holds only some of them. Each standalone number is therefore
// also filed under the column it belongs to: the word right before it (its
// key: "answer" in `"answer": 70` or `answer: 70`) and its position among
// the numbers of its line ("#4" in `2025,I,3,10,70`). Each column keeps its
// own window of 2 x len(problems) values, and a column whose window holds
// K of the eligible answers flags, as the number window does.

// maxColumns bounds the columns one Check keeps; when full, the columns
// with the fewest answers in their window are dropped first.
const maxColumns = 1 << 14

// maxPositions bounds the positional columns of a line.
const maxPositions = 16

type column struct {
	vals     []int16 // ring: eligible answer index or -1
	lines    []int32
	head, n  int
	counts   []uint8
	distinct int
}

type columns struct {
	m        map[string]*column
	w        int
	na       int // eligible answers
	best     int
	bestKey  string
	bestLine []int
	keyBuf   []byte
}

func (cs *columns) add(key []byte, a int, line int) {
	col, ok := cs.m[string(key)]
	if !ok {
		if len(cs.m) >= maxColumns {
			cs.evict()
		}
		col = &column{}
		cs.m[string(key)] = col
	}
	w := cs.w
	if col.vals == nil {
		// no eligible answer yet: only the count of values matters (the
		// ring would hold nothing but -1)
		if a < 0 {
			if col.n < w {
				col.n++
			}
			return
		}
		col.vals, col.lines = make([]int16, w), make([]int32, w)
		for i := range col.vals {
			col.vals[i] = -1
		}
		col.head = col.n % w
	}
	if col.n == w {
		if old := col.vals[col.head]; old >= 0 {
			col.counts[old]--
			if col.counts[old] == 0 {
				col.distinct--
			}
		}
	} else {
		col.n++
	}
	col.vals[col.head] = int16(a)
	col.lines[col.head] = int32(line)
	col.head = (col.head + 1) % w
	if a >= 0 {
		if col.counts == nil {
			col.counts = make([]uint8, cs.na)
		}
		col.counts[a]++
		if col.counts[a] == 1 {
			col.distinct++
		}
	}
	if col.distinct > cs.best {
		cs.best = col.distinct
		cs.bestKey = string(key)
		var lines []int
		for k := 0; k < col.n; k++ {
			i := (col.head - 1 - k + w) % w
			if col.vals[i] >= 0 {
				lines = addLineUncapped(lines, int(col.lines[i]))
			}
		}
		if len(lines) > maxLines {
			lines = lines[:maxLines]
		}
		cs.bestLine = lines
	}
}

// evict drops the columns with the fewest answers in their window until at
// most half the bound is left.
func (cs *columns) evict() {
	for d := 0; len(cs.m) > maxColumns/2; d++ {
		for k, col := range cs.m {
			if col.distinct <= d {
				delete(cs.m, k)
			}
		}
	}
}

// columnNumber files a standalone number under its columns: the key word
// before it (prev, when the previous token is a word) and its position in
// its line.
func (c *checker) columnNumber(a int, prev []byte, ordinal int) {
	cs := &c.cols
	if cs.m == nil {
		return
	}
	if len(prev) > 0 && isASCIILetter(prev[0]) || len(prev) > 0 && prev[0] >= 0x80 {
		cs.keyBuf = append(append(cs.keyBuf[:0], 'k', ':'), prev...)
		cs.add(cs.keyBuf, a, c.line)
	}
	if ordinal < maxPositions {
		cs.keyBuf = append(append(cs.keyBuf[:0], '#'), strconv.Itoa(ordinal)...)
		cs.add(cs.keyBuf, a, c.line)
	}
}

// columnName describes a column key for a finding.
func columnName(key string) string {
	if len(key) > 2 && key[:2] == "k:" {
		return fmt.Sprintf("the values of the key %s", strconv.QuoteToASCII(key[2:]))
	}
	if len(key) > 1 && key[0] == '#' {
		n, _ := strconv.Atoi(key[1:])
		return fmt.Sprintf("number %d of consecutive lines", n+1)
	}
	return key
}
