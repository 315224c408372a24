package contamination

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
)

// This file generates the stand-in eval set the tests use instead of the
// real AIME25 problems (third-party text that must not be committed): 30
// competition-style statements built from templates, with LaTeX, numbers and
// varied wording, 30-120 words each, integer answers 0..999 (some below 10).
// The answers are labels for the tests, not solutions. It also generates
// ordinary math training text (other templates, same vocabulary) that must
// never be flagged.

var (
	names   = []string{"Ava", "Bruno", "Chiara", "Dmitri", "Elif", "Farah", "Goran", "Hiroshi", "Ines", "Jonas", "Kwame", "Leila", "Mateo", "Nadia", "Oskar", "Priya", "Quentin", "Rosa", "Soren", "Tamsin"}
	objects = []string{"marbles", "tokens", "beads", "tiles", "coins", "pebbles", "cards", "stamps", "shells", "buttons"}
	shapes  = []string{"hexagon", "octagon", "pentagon", "decagon", "heptagon", "nonagon"}
	colors  = []string{"crimson", "teal", "amber", "violet", "ivory", "cobalt", "olive", "scarlet"}
)

func pick[T any](r *rand.Rand, xs []T) T { return xs[r.IntN(len(xs))] }

// standInTemplates each write one competition-style statement.
var standInTemplates = []func(r *rand.Rand) string{
	func(r *rand.Rand) string {
		a, b := 3+r.IntN(20), 2+r.IntN(9)
		return fmt.Sprintf("Let $P(x) = x^{%d} - %dx + %d$ be a polynomial with roots $r_1, r_2, \\ldots, r_{%d}$. The value of $\\sum_{i} \\frac{1}{1 - r_i}$ can be written as $\\frac{m}{n}$, where $m$ and $n$ are coprime natural numbers. Compute the last three digits of $m \\cdot n$.", a, b, a+b, a)
	},
	func(r *rand.Rand) string {
		n1, n2 := 4+r.IntN(12), 20+r.IntN(60)
		return fmt.Sprintf("%s arranges %d %s %s in a circle and then paints every third one %s. Two arrangements that differ by a rotation are regarded as identical, but reflections are counted separately. How many essentially distinct circular arrangements of the %s can %s produce when exactly $%d$ of the painted ones must be adjacent to an unpainted one, given that the total weight is $%d$ grams?", pick(r, names), n1, pick(r, colors), pick(r, objects), pick(r, colors), pick(r, objects), pick(r, names), n1/2, n2)
	},
	func(r *rand.Rand) string {
		s := 5 + r.IntN(30)
		return fmt.Sprintf("A regular %s has side length $%d$. A lattice walker starts at one vertex and moves along diagonals only, never revisiting a vertex. If the squared length of the longest diagonal equals $a + b\\sqrt{c}$ with $c$ squarefree, report $a + b + c$ modulo $%d$, where each step costs $\\sqrt{%d}$ units of fuel.", pick(r, shapes), s, 97+r.IntN(800), s+1)
	},
	func(r *rand.Rand) string {
		k := 2 + r.IntN(7)
		return fmt.Sprintf("Consider the sequence defined by $a_0 = %d$, $a_1 = %d$ and $a_{n+2} = %d a_{n+1} - a_n^2 \\cdot \\frac{1}{%d}$ for all $n \\ge 0$. Ignoring overflow, the terms eventually cycle with some period. Determine the period multiplied by the first index at which the cycle begins, noting that the zeroth term already counts as visited.", k, k+3, k*2, k+1)
	},
	func(r *rand.Rand) string {
		w, h := 3+r.IntN(6), 3+r.IntN(6)
		return fmt.Sprintf("On a $%d \\times %d$ chessboard, a rook tour visits every square exactly once using moves of length one or two. Call a tour balanced if it changes direction precisely $%d$ times. Among balanced tours that begin in the lower left corner and finish adjacent to the upper edge, how many end on a %s square when squares are coloured alternately %s and %s?", w, h, w+h, pick(r, colors), pick(r, colors), pick(r, colors))
	},
	func(r *rand.Rand) string {
		p := []int{7, 11, 13, 17, 19, 23}[r.IntN(6)]
		return fmt.Sprintf("Let $N$ count the ordered quadruples $(w, x, y, z)$ of nonnegative integers satisfying $w + 2x + 3y + 4z = %d$ and $w^2 + x^2 \\equiv y^2 + z^2 \\pmod{%d}$. Give the residue of $N$ after division by $%d$.", 40+r.IntN(60), p, 500+r.IntN(499))
	},
	func(r *rand.Rand) string {
		a := 6 + r.IntN(20)
		return fmt.Sprintf("Triangle $XYZ$ has $XY = %d$, $YZ = %d$, and $ZX = %d$. The incircle touches $YZ$ at $T$, and the excircle opposite $X$ touches $YZ$ at $U$. A point $V$ on segment $XT$ satisfies $XV : VT = 2 : 3$. Express $TU \\cdot XV^2$ as $\\frac{p\\sqrt{q}}{r}$ in lowest terms with $q$ free of square factors, and submit $p + q + r$.", a, a+5, a+9)
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("%s writes the integers from $1$ to $%d$ on a blackboard. Each minute %s erases two numbers $u$ and $v$ and writes $u + v + uv$ in their place. After all but one number has been erased, the survivor is $S$. Find the number of positive divisors of $S + 1$ that are perfect cubes, counting the trivial divisor once.", pick(r, names), 10+r.IntN(40), pick(r, names))
	},
	func(r *rand.Rand) string {
		b := 3 + r.IntN(6)
		return fmt.Sprintf("In base $%d$, a positive integer is called mirrored when its digits read the same forwards and backwards and none of them is zero. Count the mirrored integers below $%d^{%d}$ whose digit sum is itself a mirrored integer in base $%d$, and whose middle digit exceeds the leading digit by at least $%d$. Present that count without any base conversion.", b, b, 4+r.IntN(3), b, 1+r.IntN(2))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("A fair %d-sided die is rolled repeatedly until the running total first exceeds $%d$. Let $E$ denote the expected number of rolls, expressed as a fraction $\\frac{u}{v}$ in lowest terms. If the die is replaced by one whose faces show the first %d odd numbers, the expectation becomes $\\frac{u'}{v'}$. Evaluate $\\lfloor 100 \\cdot \\frac{u}{v} \\cdot \\frac{v'}{u'} \\rfloor$ using exact arithmetic throughout the computation.", 4+r.IntN(9), 30+r.IntN(70), 3+r.IntN(5))
	},
	func(r *rand.Rand) string {
		c := 2 + r.IntN(9)
		return fmt.Sprintf("The curves $y = x^3 - %dx$ and $x = y^3 - %dy$ meet at several points in the plane. The sum of the squares of the distances from the origin to these intersection points equals $\\frac{j + k\\sqrt{%d}}{l}$. Compute $j + k + l$, assuming $j$, $k$, $l$ share no common factor.", c, c, c+1)
	},
	func(r *rand.Rand) string {
		n := 5 + r.IntN(10)
		return fmt.Sprintf("Twelve %s and %d %s sit in a bag. %s draws them one at a time without replacement, stopping as soon as two consecutive draws match in colour. What is the probability, written as $\\frac{g}{h}$, that more than half of the %s are still in the bag at that moment? Report $g + h$ reduced modulo $%d$.", pick(r, objects), n, pick(r, objects), pick(r, names), pick(r, objects), 900+r.IntN(99))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("A cyclic quadrilateral $ABCD$ has $AB = %d$, $BC = %d$, $CD = %d$, and $DA = %d$. Its diagonals cross at $P$, and the circle through $A$, $P$, $D$ meets line $BC$ again at $Q$. Given that $PQ^2 = \\frac{s}{t}$ with coprime $s$ and $t$, output $s - t$ modulo $1000$, interpreting negative residues as positive ones.", 4+r.IntN(9), 5+r.IntN(9), 6+r.IntN(9), 7+r.IntN(9))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Define $f(n)$ as the number of ways to tile a $2 \\times n$ strip with dominoes and $L$-shaped trominoes, where trominoes may be rotated but not reflected. Show that $f$ obeys a linear recurrence, then compute $f(%d) \\bmod %d$, the tiles being indistinguishable apart from shape and the strip lying flat on a %s table.", 10+r.IntN(30), 100+r.IntN(900), pick(r, colors))
	},
	func(r *rand.Rand) string {
		return fmt.Sprintf("Real numbers $p$, $q$, $r$ satisfy $p + q + r = %d$, $pq + qr + rp = %d$ and $pqr = %d$. Determine the greatest integer not exceeding $\\sqrt{p^4 + q^4 + r^4}$, where every intermediate quantity should be simplified using Newton's identities rather than approximated numerically.", 3+r.IntN(9), 2+r.IntN(9), 1+r.IntN(9))
	},
}

// standInProblems returns the deterministic stand-in eval set.
func standInProblems() []Problem {
	r := rand.New(rand.NewPCG(2025, 30))
	out := make([]Problem, 0, 30)
	for i := 0; i < 30; i++ {
		t := standInTemplates[i%len(standInTemplates)]
		st := t(r)
		if i >= len(standInTemplates) {
			// the second use of a template is reworded so that the two
			// problems share as few phrases as possible
			st = reword(r, st)
		}
		ans := r.IntN(1000)
		if i%7 == 3 {
			ans = r.IntN(10)
		}
		out = append(out, Problem{ID: fmt.Sprint(i + 1), Statement: st, Answer: fmt.Sprint(ans)})
	}
	return out
}

// reword substitutes synonyms so that a template's second use differs.
func reword(r *rand.Rand, s string) string {
	repl := strings.NewReplacer(
		" be a polynomial with roots ", " denote a monic polynomial whose zeros are ",
		" can be written as ", " equals, in lowest terms, ",
		" in a circle and then paints every third one ", " around a round table and colours each third item ",
		" has side length ", " possesses edges of length ",
		"Consider the sequence defined by", "A recurrence is specified through",
		" chessboard, a rook tour visits every square exactly once", " board, a wandering rook passes through each cell a single time",
		"Let $N$ count the ordered quadruples", "Write $N$ for the number of ordered quadruples",
		"Triangle $XYZ$ has", "In triangle $XYZ$ we are told",
		" writes the integers from ", " records every whole number from ",
		"In base ", "Working in base ",
		"A fair ", "An unbiased ",
		"The curves ", "Two cubic curves, namely ",
		"Twelve ", "Exactly twelve ",
		"A cyclic quadrilateral ", "An inscribed quadrilateral ",
		"Define $f(n)$ as the number of ways", "For each $n$ let $f(n)$ record how many ways there are",
		"Real numbers ", "Three reals ",
		" and ", " together with ",
		" the ", " that ",
	)
	s = repl.Replace(s)
	return s + fmt.Sprintf(" (Variant %s-%d.)", pick(r, colors), r.IntN(1000))
}

// ordinaryMath generates math training text that is not any stand-in
// problem: GSM8K-style word problems and competition-style problems with
// the usual boilerplate ("relatively prime positive integers", "remainder
// when N is divided by 1000"), LaTeX and numbers, each with a worked answer.
func ordinaryMath(r *rand.Rand, n int) []string {
	gsm := []func() string{
		func() string {
			a, b, c := 2+r.IntN(30), 2+r.IntN(12), 1+r.IntN(9)
			return fmt.Sprintf("%s buys %d packs of %s. Each pack holds %d %s, and she gives %d %s to each of her %d friends. How many %s does she have left? She starts with $%d \\cdot %d = %d$ and gives away $%d$, so the answer is $\\boxed{%d}$.", pick(r, names), a, pick(r, objects), b, pick(r, objects), c, pick(r, objects), b, pick(r, objects), a, b, a*b, b*c, a*b-b*c)
		},
		func() string {
			h, w := 10+r.IntN(50), 2+r.IntN(20)
			return fmt.Sprintf("A %s garden is %d meters long and %d meters wide. Fencing costs $%d$ dollars per meter. What is the total cost of fencing the garden? The perimeter is $2(%d + %d) = %d$ meters, so the cost is $%d$ dollars.", pick(r, colors), h, w, 3+r.IntN(9), h, w, 2*(h+w), 0)
		},
		func() string {
			p := 10 + r.IntN(90)
			return fmt.Sprintf("%s saves %d%% of a weekly allowance of $%d$ dollars. After $\\frac{%d}{2}$ weeks, how much has been saved? Half of %d weeks is %d weeks; %d%% of %d is $\\frac{%d \\cdot %d}{100}$ per week.", pick(r, names), p, 20+r.IntN(80), 2*(1+r.IntN(9)), 2*(1+r.IntN(9)), 1+r.IntN(9), p, 50, p, 50)
		},
		func() string {
			return fmt.Sprintf("Let $m$ and $n$ be relatively prime positive integers such that $\\frac{m}{n} = \\frac{%d}{%d}$. Find $m+n$. Reducing the fraction by $\\gcd(%d, %d)$ gives the answer.", 2*(1+r.IntN(40)), 2*(41+r.IntN(40)), 12, 18)
		},
		func() string {
			return fmt.Sprintf("Find the remainder when $%d^{%d}$ is divided by $1000$. Let $N$ be the number of steps; by Euler's theorem $\\phi(1000) = 400$, so reduce the exponent modulo $400$ first and then compute $N \\bmod 1000$.", 2+r.IntN(20), 100+r.IntN(900))
		},
		func() string {
			return fmt.Sprintf("Find the number of ordered pairs $(a,b)$ of integers such that $a^2 + b^2 = %d$. The probability that a random pair works can be written as $\\frac{m}{n}$, where $m$ and $n$ are relatively prime positive integers. Find $m+n$.", 25+r.IntN(200))
		},
		func() string {
			return fmt.Sprintf("Find the sum of all positive integers $n$ such that $n^2 - %dn + %d$ is a perfect square. Completing the square, $(2n - %d)^2 - 4k^2 = %d$, and factoring gives finitely many cases.", 10+r.IntN(20), 50+r.IntN(99), 10+r.IntN(20), r.IntN(99))
		},
		func() string {
			return fmt.Sprintf("In triangle $ABC$, $AB = %d$, $BC = %d$, and $\\angle B = 60^\\circ$. The area of the triangle can be expressed as $m\\sqrt{n}$, where $m$ and $n$ are positive integers and $n$ is not divisible by the square of any prime. Find $m + n$. By the formula $\\frac{1}{2} ab \\sin C$ the area is $\\frac{%d\\sqrt{3}}{4}$.", 3+r.IntN(20), 3+r.IntN(20), 1+r.IntN(400))
		},
		func() string {
			return fmt.Sprintf("Let $N$ be the number of subsets of $\\{1, 2, \\ldots, %d\\}$ that contain no two consecutive integers. Find the remainder when $N$ is divided by $1000$. The count satisfies the Fibonacci recurrence, so $N = F_{%d}$.", 8+r.IntN(20), 10+r.IntN(20))
		},
		func() string {
			return fmt.Sprintf("Problem: A train travels %d miles in %d hours. At the same rate, how far does it travel in %d hours?\nSolution: The speed is $\\frac{%d}{%d}$ miles per hour, so the distance is $%d$ miles.\nAnswer: %d", 60+r.IntN(300), 2+r.IntN(6), 1+r.IntN(9), 60, 2, 30, 30+r.IntN(900))
		},
	}
	out := make([]string, n)
	for i := range out {
		out[i] = gsm[r.IntN(len(gsm))]()
	}
	return out
}

// jsonRow encodes a training row the way a data file would hold it.
func jsonRow(kv ...string) string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// addedFile renders lines as a git "new file" patch.
func addedFile(name string, lines []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "diff --git a/%s b/%s\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/%s\n@@ -0,0 +1,%d @@\n", name, name, name, len(lines))
	for _, l := range lines {
		b.WriteString("+")
		b.WriteString(l)
		b.WriteString("\n")
	}
	return b.String()
}

// addedFileHeaderLines is how many patch lines addedFile writes before the
// first added line.
const addedFileHeaderLines = 6

// ordinaryCode generates n lines of plausible source code and prose.
func ordinaryCode(r *rand.Rand, n int) []string {
	idents := []string{"batch", "model", "optimizer", "config", "logger", "dataset", "tokenizer", "step", "epoch", "grad", "loss", "rank", "world", "device", "cache"}
	out := make([]string, 0, n)
	for len(out) < n {
		a, b := pick(r, idents), pick(r, idents)
		switch r.IntN(8) {
		case 0:
			out = append(out, fmt.Sprintf("def %s_%s(%s, %s=%d):", a, b, a, b, r.IntN(100)))
		case 1:
			out = append(out, fmt.Sprintf("    %s = %s.get(%q, %d)  # default %d", a, b, a, r.IntN(1000), r.IntN(64)))
		case 2:
			out = append(out, fmt.Sprintf("    if %s > %d and not %s:", a, r.IntN(512), b))
		case 3:
			out = append(out, fmt.Sprintf("        raise ValueError(f\"bad %s: {%s!r}\\n\")", a, b))
		case 4:
			out = append(out, fmt.Sprintf("func (s *%s) %s(ctx context.Context, n int) error { return s.%s(ctx, n+%d) }", title(a), title(b), a, r.IntN(16)))
		case 5:
			out = append(out, fmt.Sprintf("%s_%s: %d", a, b, r.IntN(4096)))
		case 6:
			out = append(out, fmt.Sprintf("# The %s is scaled by the %s before each %s; see section %d.", a, b, pick(r, idents), r.IntN(12)))
		default:
			out = append(out, "")
		}
	}
	return out
}

func title(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
