package load

import "bytes"

// objScanner walks the top-level members of one JSON object without
// allocating. It is lenient: it trusts the server to send JSON and only
// tracks enough structure (strings, nesting) to find top-level keys.
type objScanner struct {
	b []byte
	i int
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

func (s *objScanner) ws() {
	for s.i < len(s.b) && isSpace(s.b[s.i]) {
		s.i++
	}
}

// open consumes the opening brace; false when b is not an object.
func (s *objScanner) open() bool {
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != '{' {
		return false
	}
	s.i++
	return true
}

// next returns the next member's key (without quotes) and leaves the scanner
// at the start of its value. ok is false at the end of the object.
func (s *objScanner) next() (key []byte, ok bool) {
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == ',' {
		s.i++
		s.ws()
	}
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	end := s.stringEnd(start)
	if end < 0 {
		return nil, false
	}
	key = s.b[start:end]
	s.i = end + 1
	s.ws()
	if s.i >= len(s.b) || s.b[s.i] != ':' {
		return nil, false
	}
	s.i++
	s.ws()
	return key, true
}

// stringEnd returns the index of the quote closing the string whose body
// starts at i, or -1.
func (s *objScanner) stringEnd(i int) int {
	for {
		j := bytes.IndexByte(s.b[i:], '"')
		if j < 0 {
			return -1
		}
		k := i + j
		bs := 0
		for p := k - 1; p >= i && s.b[p] == '\\'; p-- {
			bs++
		}
		if bs%2 == 0 {
			return k
		}
		i = k + 1
	}
}

// skip moves past the value at the scanner's position.
func (s *objScanner) skip() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch s.b[s.i] {
	case '"':
		end := s.stringEnd(s.i + 1)
		if end < 0 {
			return false
		}
		s.i = end + 1
		return true
	case '{', '[':
		depth := 0
		for s.i < len(s.b) {
			switch c := s.b[s.i]; c {
			case '"':
				end := s.stringEnd(s.i + 1)
				if end < 0 {
					return false
				}
				s.i = end
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					s.i++
					return true
				}
			}
			s.i++
		}
		return false
	default:
		for s.i < len(s.b) {
			switch s.b[s.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return true
			}
			s.i++
		}
		return true
	}
}

// uint reads an unsigned integer value, bare or as a string of digits
// (JSON-RPC ids may be either). ok is false for anything else (null, a
// negative or fractional number) and the value is skipped.
func (s *objScanner) uint() (v uint64, ok bool) {
	quoted := s.i < len(s.b) && s.b[s.i] == '"'
	j := s.i
	if quoted {
		j++
	}
	n := 0
	for j < len(s.b) && s.b[j] >= '0' && s.b[j] <= '9' {
		v = v*10 + uint64(s.b[j]-'0')
		j++
		n++
	}
	if n == 0 || n > 19 {
		s.skip()
		return 0, false
	}
	if quoted {
		if j >= len(s.b) || s.b[j] != '"' {
			s.skip()
			return 0, false
		}
		j++
	} else if j < len(s.b) && (s.b[j] == '.' || s.b[j] == 'e' || s.b[j] == 'E') {
		s.skip()
		return 0, false
	}
	s.i = j
	return v, true
}

// str reads a string value without unescaping; ok is false for other values.
func (s *objScanner) str() ([]byte, bool) {
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		s.skip()
		return nil, false
	}
	end := s.stringEnd(s.i + 1)
	if end < 0 {
		return nil, false
	}
	v := s.b[s.i+1 : end]
	s.i = end + 1
	return v, true
}

// FindUint returns the unsigned integer that follows the first occurrence of
// key (for example `"delivered":`) in msg. It does not allocate.
func FindUint(msg []byte, key string) (uint64, bool) {
	k := bytes.Index(msg, []byte(key))
	if k < 0 {
		return 0, false
	}
	s := objScanner{b: msg, i: k + len(key)}
	s.ws()
	return s.uint()
}

var timeKey = []byte(`"t":`)

// EventTime extracts the publish timestamp the generator put in an event's
// data (see Publish), as ns since the generator's epoch.
func EventTime(msg []byte) (int64, bool) {
	k := bytes.Index(msg, timeKey)
	if k < 0 {
		return 0, false
	}
	s := objScanner{b: msg, i: k + len(timeKey)}
	s.ws()
	v, ok := s.uint()
	if !ok || v < TimeBase {
		return 0, false
	}
	return int64(v - TimeBase), true
}
