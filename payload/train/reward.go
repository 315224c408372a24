package train

import (
	"bytes"
	"io"
	"math"
	"strconv"
)

// RewardMarker starts the line NeMo RL prints after each GRPO step:
// "  • Avg Reward: 0.3125".
const RewardMarker = "• Avg Reward:"

// maxNumberBytes bounds the number after the marker; a longer one is not a
// match.
const maxNumberBytes = 4096

// ParseAvgReward returns the last average reward in a trainer log, as the
// reference does with re.findall(r"• Avg Reward:\s*([0-9]+(?:\.[0-9]+)?)")
// and the last match, with these differences:
//
//   - the number may have a sign and an exponent:
//     [+-]?[0-9]+(\.[0-9]+)?([eE][+-]?[0-9]+)? (NeMo RL prints {:.4f}, so
//     a negative mean reward, which the reference cannot read, is kept);
//   - \s* is ASCII whitespace only (space, \t, \n, \v, \f, \r), where
//     Python's also takes Unicode spaces;
//   - a number that is not finite as a float64 (1e999), or longer than
//     4096 bytes, is not a match.
//
// As with the regex, the longest prefix that fits the pattern is taken
// ("1.5e" reads 1.5), "nan" or text after the marker is no match, and
// "Avg Filtered/Total Reward" (dynamic sampling) does not count. A -0
// reads as 0.
func ParseAvgReward(text []byte) (float64, bool) {
	var s rewardScanner
	s.Write(text)
	return s.Result()
}

// LastAvgReward is ParseAvgReward over a stream, in constant memory.
func LastAvgReward(r io.Reader) (float64, bool, error) {
	var s rewardScanner
	if _, err := io.Copy(&s, r); err != nil {
		return 0, false, err
	}
	v, ok := s.Result()
	return v, ok, nil
}

// rewardScanner finds reward lines in a byte stream written to it in any
// pieces; Result gives the last one. The zero value is ready.
type rewardScanner struct {
	state scanState
	k     int // bytes of RewardMarker matched so far
	num   numberScanner
	last  float64
	found bool
}

type scanState uint8

const (
	inText   scanState = iota // looking for the marker
	inSpaces                  // after the marker, skipping whitespace
	inNumber                  // reading the number
)

// Write never fails.
func (s *rewardScanner) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 {
		if s.state == inText && s.k == 0 {
			i := bytes.IndexByte(p, RewardMarker[0])
			if i < 0 {
				break
			}
			p = p[i:]
		}
		s.step(p[0])
		p = p[1:]
	}
	return n, nil
}

func (s *rewardScanner) step(c byte) {
	switch s.state {
	case inText:
		// RewardMarker[0] (0xE2, the first byte of '•') occurs nowhere
		// else in the marker, so a mismatch restarts at this byte.
		switch {
		case c == RewardMarker[s.k]:
			s.k++
			if s.k == len(RewardMarker) {
				s.k, s.state = 0, inSpaces
			}
		case c == RewardMarker[0]:
			s.k = 1
		default:
			s.k = 0
		}
	case inSpaces:
		switch c {
		case ' ', '\t', '\n', '\v', '\f', '\r':
		default:
			s.state = inNumber
			s.num = numberScanner{}
			s.step(c)
		}
	case inNumber:
		if s.num.feed(c) {
			return
		}
		// c ends the number; it is looked at again as text. (The bytes
		// taken after the longest match, such as the "e" of "1e", are
		// digits, signs, '.', 'e' or 'E': none can start the marker.)
		s.finish()
		s.step(c)
	}
}

// finish ends a number in progress.
func (s *rewardScanner) finish() {
	if s.state == inNumber {
		if v, ok := s.num.value(); ok {
			s.last, s.found = v, true
		}
	}
	s.state, s.k = inText, 0
}

// Result returns the last reward seen, a number still being read at the
// end of the input included. It may be called more than once; the input
// is treated as ended.
func (s *rewardScanner) Result() (float64, bool) {
	s.finish()
	return s.last, s.found
}

// numberScanner reads [+-]?D+(\.D+)?([eE][+-]?D+)? greedily, remembering
// the longest complete prefix.
type numberScanner struct {
	st       numState
	buf      []byte
	n        int // bytes taken (buf holds the first maxNumberBytes)
	complete int // length of the longest complete prefix
}

type numState uint8

const (
	nStart    numState = iota // sign or digit
	nSign                     // digit
	nInt                      // digits, '.', e/E
	nDot                      // digit
	nFrac                     // digits, e/E
	nExp                      // sign or digit
	nExpSign                  // digit
	nExpDigit                 // digits
)

// feed takes c if it can continue the number.
func (m *numberScanner) feed(c byte) bool {
	digit := c >= '0' && c <= '9'
	next := m.st
	switch m.st {
	case nStart:
		switch {
		case c == '+' || c == '-':
			next = nSign
		case digit:
			next = nInt
		default:
			return false
		}
	case nSign:
		if !digit {
			return false
		}
		next = nInt
	case nInt:
		switch {
		case digit:
		case c == '.':
			next = nDot
		case c == 'e' || c == 'E':
			next = nExp
		default:
			return false
		}
	case nDot:
		if !digit {
			return false
		}
		next = nFrac
	case nFrac:
		switch {
		case digit:
		case c == 'e' || c == 'E':
			next = nExp
		default:
			return false
		}
	case nExp:
		switch {
		case c == '+' || c == '-':
			next = nExpSign
		case digit:
			next = nExpDigit
		default:
			return false
		}
	case nExpSign:
		if !digit {
			return false
		}
		next = nExpDigit
	case nExpDigit:
		if !digit {
			return false
		}
	}
	m.st = next
	if m.n < maxNumberBytes {
		m.buf = append(m.buf, c)
	}
	m.n++
	switch next {
	case nInt, nFrac, nExpDigit:
		m.complete = m.n
	}
	return true
}

func (m *numberScanner) value() (float64, bool) {
	if m.complete == 0 || m.complete > maxNumberBytes {
		return 0, false
	}
	v, err := strconv.ParseFloat(string(m.buf[:m.complete]), 64)
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return 0, false
	}
	if err != nil {
		if ne, ok := err.(*strconv.NumError); !ok || ne.Err != strconv.ErrRange {
			return 0, false
		}
	}
	if v == 0 {
		v = 0 // no -0
	}
	return v, true
}
