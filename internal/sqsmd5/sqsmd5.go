package sqsmd5

import (
	"cmp"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"slices"
	"strings"
	"unicode/utf8"
)

// Body is MD5OfMessageBody: the hex MD5 of the body.
func Body(body string) string {
	sum := md5.Sum([]byte(body))
	return hex.EncodeToString(sum[:])
}

// Attribute is one message attribute (or system attribute) as SQS hashes
// it: its data type and the value that type carries.
type Attribute struct {
	// DataType is "String", "Number" or "Binary", possibly with a custom
	// label ("Number.float", "Binary.png").
	DataType string
	// StringValue is the value of String and Number types.
	StringValue string
	// BinaryValue is the value of Binary types (decoded, not base64).
	BinaryValue []byte
}

// Transport types, the byte SQS hashes after the data type.
const (
	transportString     byte = 1
	transportBinary     byte = 2
	transportStringList byte = 3 // reserved by SQS; see doc.go
	transportBinaryList byte = 4
)

// Attributes is MD5OfMessageAttributes (or MD5OfMessageSystemAttributes) of
// attrs, keyed by name; "" when there are none.
func Attributes(attrs map[string]Attribute) string {
	if len(attrs) == 0 {
		return ""
	}
	entries := make([]entry, 0, len(attrs))
	for name, a := range attrs {
		e := entry{name: name, dataType: a.DataType, transport: transportString, values: [][]byte{[]byte(a.StringValue)}}
		if IsBinary(a.DataType) {
			e.transport, e.values = transportBinary, [][]byte{a.BinaryValue}
		}
		entries = append(entries, e)
	}
	return digest(entries)
}

// IsBinary reports whether a data type carries a binary value: "Binary" or
// "Binary.<label>".
func IsBinary(dataType string) bool {
	base, _, _ := strings.Cut(dataType, ".")
	return base == "Binary"
}

// entry is an attribute as it is hashed.
type entry struct {
	name, dataType string
	transport      byte
	values         [][]byte
}

// digest hashes entries in SQS's order and layout.
func digest(entries []entry) string {
	slices.SortFunc(entries, func(a, b entry) int { return compareUTF16(a.name, b.name) })
	h := md5.New()
	for _, e := range entries {
		writeLengthPrefixed(h, []byte(e.name))
		writeLengthPrefixed(h, []byte(e.dataType))
		h.Write([]byte{e.transport})
		for _, v := range e.values {
			writeLengthPrefixed(h, v)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func writeLengthPrefixed(h hash.Hash, b []byte) {
	h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
	h.Write(b)
}

// compareUTF16 orders strings as Java's String.compareTo does: by UTF-16
// code units. Strings equal that way (only possible with invalid UTF-8) fall
// back to byte order, so that the order is total.
func compareUTF16(a, b string) int {
	x, y := a, b
	for x != "" && y != "" {
		rx, nx := utf8.DecodeRuneInString(x)
		ry, ny := utf8.DecodeRuneInString(y)
		if rx != ry {
			if c := cmp.Compare(firstUTF16Unit(rx), firstUTF16Unit(ry)); c != 0 {
				return c
			}
			// Both above U+FFFF with the same high surrogate: the low
			// surrogates order as the runes do.
			return cmp.Compare(rx, ry)
		}
		x, y = x[nx:], y[ny:]
	}
	switch {
	case x == "" && y != "":
		return -1
	case x != "" && y == "":
		return 1
	}
	return strings.Compare(a, b)
}

// firstUTF16Unit is the first UTF-16 code unit of r: r itself in the Basic
// Multilingual Plane, its high surrogate above it.
func firstUTF16Unit(r rune) rune {
	if r < 0x10000 {
		return r
	}
	return 0xD800 + (r-0x10000)>>10
}
