package contamination

import (
	"encoding/base32"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
)

// otherYearText is ordinary competition and word-problem text (another
// year's set, as a training file would hold it): JSONL rows with answers.
func otherYearText(seed uint64, n int) ([]string, []byte) {
	r := rand.New(rand.NewPCG(seed, 40))
	var rows []string
	for _, it := range ordinaryMath(r, n) {
		rows = append(rows, jsonRow("question", it, "answer", fmt.Sprint(r.IntN(1000))))
	}
	return rows, []byte(strings.Join(rows, "\n") + "\n")
}

// TestRoundThreeOrdinary: other problems (ordinary math text) in every
// form the checker now decodes or reads a second way are read and not
// flagged, and are not refused: they read as text.
func TestRoundThreeOrdinary(t *testing.T) {
	ps := standInProblems()
	rows, data := otherYearText(1, 120)
	var stmts []string
	for _, row := range rows {
		stmts = append(stmts, row[:min(len(row), 400)])
	}
	cyr := strings.NewReplacer("a", "а", "e", "е", "o", "о", "p", "р", "c", "с")
	r := rand.New(rand.NewPCG(40, 9))
	var shuffled []string
	for _, s := range stmts {
		w := strings.Fields(s)
		for len(w) > 0 {
			k := min(len(w), 5+r.IntN(4))
			shuffled = append(shuffled, strings.Join(w[:k], " "))
			w = w[k:]
		}
	}
	r.Shuffle(len(shuffled), func(i, j int) { shuffled[i], shuffled[j] = shuffled[j], shuffled[i] })
	mapLines := func(f func(string) string) []string {
		var out []string
		for _, s := range stmts {
			out = append(out, f(s))
		}
		return out
	}
	var names string
	for i, s := range stmts[:40] {
		w := strings.Fields(s)
		names += addedFile(fmt.Sprintf("NeMo-RL/data/%s/%d.txt", strings.Join(w[:min(len(w), 10)], "_"), i), []string{"x"})
	}
	cases := map[string][]byte{
		"hex":              []byte(addedFile("NeMo-RL/x.txt", wrapN(hex.EncodeToString(data), 64))),
		"base32":           []byte(addedFile("NeMo-RL/x.txt", wrapN(base32.StdEncoding.EncodeToString(data), 72))),
		"base85":           []byte(addedFile("NeMo-RL/x.txt", wrapN(b85Of(data, b85Alphabet), 76))),
		"Ascii85":          []byte(addedFile("NeMo-RL/x.txt", wrapN(a85Of(data), 76))),
		"percent":          []byte(addedFile("NeMo-RL/x.txt", mapLines(url.PathEscape))),
		"UTF-16":           binarySectionPatch("NeMo-RL/x.txt", utf16le(string(data))),
		"raw deflate":      binarySectionPatch("NeMo-RL/x.bin", rawDeflate(data)),
		"LZMA-alone":       binarySectionPatch("NeMo-RL/x.lzma", lzmaAlone(data)),
		"base64 literals":  []byte(addedFile("NeMo-RL/x.py", pyLiterals(base64.StdEncoding.EncodeToString(gz(data)), 8, 6))),
		"byte array":       []byte(addedFile("NeMo-RL/x.py", []string{"D = bytes([" + intList(gz(data), "%d") + "])"})),
		"rot13":            []byte(addedFile("NeMo-RL/x.txt", mapLines(rot13))),
		"reversed":         []byte(addedFile("NeMo-RL/x.txt", mapLines(reverseString))),
		"reversed words":   []byte(addedFile("NeMo-RL/x.txt", mapLines(reverseWordOrder))),
		"look-alikes":      []byte(addedFile("NeMo-RL/x.txt", mapLines(cyr.Replace))),
		"html tags":        []byte(addedFile("NeMo-RL/x.html", mapLines(func(s string) string { return tagLetters(s, "<b>", "</b>") }))),
		"split literals":   []byte(addedFile("NeMo-RL/x.py", splitLiterals(strings.Join(stmts[:30], " ")))),
		"shuffled rows":    []byte(addedFile("NeMo-RL/rows.txt", shuffled)),
		"in file names":    []byte(names),
		"plain, 120 items": []byte(addedFile("NeMo-RL/x.jsonl", rows)),
	}
	for name, patch := range cases {
		rep := Check(patch, ps)
		if rep.Contaminated {
			t.Errorf("%s: flagged: %+v", name, rep.Findings)
		}
	}
}
