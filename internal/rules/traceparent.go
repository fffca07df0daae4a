package rules

import "strings"

// ValidTraceparent reports whether v is a W3C Trace Context traceparent
// (https://www.w3.org/TR/trace-context/#traceparent-header) that push
// delivery can pass on as a header (so REST refuses any other, and push
// drops a stored one that is not): version-traceid-parentid-flags in
// lowercase hex (2-32-16-2 digits), version not ff, trace and parent ids
// not all zeros. Version 00 has exactly these four fields; a later version
// may add fields after a dash, in visible ASCII.
func ValidTraceparent(v string) bool {
	const size = 55 // 2+1+32+1+16+1+2
	if len(v) < size || v[2] != '-' || v[35] != '-' || v[52] != '-' {
		return false
	}
	version, trace, parent, flags := v[:2], v[3:35], v[36:52], v[53:55]
	for _, part := range []string{version, trace, parent, flags} {
		if !lowerHex(part) {
			return false
		}
	}
	if version == "ff" || allZero(trace) || allZero(parent) {
		return false
	}
	if len(v) == size {
		return true
	}
	if version == "00" || v[size] != '-' {
		return false
	}
	for i := size; i < len(v); i++ {
		if v[i] <= ' ' || v[i] > '~' {
			return false
		}
	}
	return true
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func allZero(s string) bool { return strings.Trim(s, "0") == "" }
