package sqs

import (
	"encoding/base64"
	"encoding/json"
	"regexp"
	"strings"

	"github.com/ferry-mq/ferry/internal/sqsmd5"
)

// Reserved REST attribute names (see doc.go): a colon, which no SQS name
// can hold.
const (
	// typesKey holds the data types of the attributes that are not
	// plain "String": a JSON object of name to data type.
	typesKey = "sqs:types"
	// traceKey holds the AWSTraceHeader system attribute.
	traceKey = "sqs:AWSTraceHeader"
)

// maxMessageAttributes is SQS's bound on a message's attributes.
const maxMessageAttributes = 10

var (
	attrNameRe = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,256}$`)
	dataTypeRe = regexp.MustCompile(`^(String|Number|Binary)(\.[A-Za-z0-9_.-]+)?$`)
	numberRe   = regexp.MustCompile(`^[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?$`)
)

// checkAttrName applies SQS's rule for a message attribute's name.
func checkAttrName(n string) error {
	lower := strings.ToLower(n)
	if !attrNameRe.MatchString(n) || strings.HasPrefix(lower, "aws.") || strings.HasPrefix(lower, "amazon.") ||
		strings.Contains(n, "..") || strings.HasPrefix(n, ".") || strings.HasSuffix(n, ".") {
		return invalidParam("MessageAttribute.Name", "the name "+n+" is not a valid message attribute name")
	}
	return nil
}

// checkAttr applies SQS's rules for one attribute's type and value.
func checkAttr(n string, a attrValue) error {
	bad := func(reason string) error {
		return fail(codeInvalidParameter, "Message (user) attribute '%s' is invalid: %s.", n, reason)
	}
	switch {
	case len(a.StringListValues) > 0 || len(a.BinaryListValues) > 0:
		return bad("list values are reserved by SQS and not supported")
	case a.DataType == "":
		return bad("the DataType is required")
	case len(a.DataType) > 256 || !dataTypeRe.MatchString(a.DataType):
		return bad("the DataType must be String, Number or Binary, with an optional .label")
	case sqsmd5.IsBinary(a.DataType):
		if len(a.BinaryValue) == 0 || a.StringValue != nil {
			return bad("a Binary attribute takes a non-empty BinaryValue only")
		}
	case a.StringValue == nil || *a.StringValue == "" || a.BinaryValue != nil:
		return bad("a String or Number attribute takes a non-empty StringValue only")
	case !validBody(*a.StringValue):
		return bad("the value holds characters SQS does not allow")
	case strings.HasPrefix(a.DataType, "Number") && !numberRe.MatchString(*a.StringValue):
		return bad("the value is not a number")
	}
	return nil
}

// toRESTAttributes encodes SQS message attributes (and AWSTraceHeader)
// as REST attributes: a String's value as it is, a Binary's in base64,
// each type other than plain String kept under typesKey.
func toRESTAttributes(attrs msgAttrMap, trace *string) map[string]string {
	if len(attrs) == 0 && trace == nil {
		return nil
	}
	out := make(map[string]string, len(attrs)+2)
	types := map[string]string{}
	for n, a := range attrs {
		if a.DataType != "String" {
			types[n] = a.DataType
		}
		if sqsmd5.IsBinary(a.DataType) {
			out[n] = base64.StdEncoding.EncodeToString(a.BinaryValue)
		} else {
			out[n] = *a.StringValue
		}
	}
	if len(types) > 0 {
		enc, _ := json.Marshal(types)
		out[typesKey] = string(enc)
	}
	if trace != nil {
		out[traceKey] = *trace
	}
	return out
}

// fromRESTAttributes decodes stored REST attributes (a JSON object of
// strings, or nil) back into SQS message attributes and the
// AWSTraceHeader. An attribute a REST client set is a String; a typed one
// whose stored value does not decode (a REST client changed it) is
// answered as a String too, so that nothing is lost.
func fromRESTAttributes(raw json.RawMessage) (msgAttrMap, *string) {
	var stored map[string]any
	if len(raw) == 0 || json.Unmarshal(raw, &stored) != nil {
		return nil, nil
	}
	types := map[string]string{}
	if t, ok := stored[typesKey].(string); ok {
		_ = json.Unmarshal([]byte(t), &types)
	}
	var trace *string
	if t, ok := stored[traceKey].(string); ok {
		trace = &t
	}
	out := msgAttrMap{}
	for n, v := range stored {
		if n == typesKey || n == traceKey || strings.HasPrefix(n, "ferry:") {
			continue // reserved: Ferry's own (a dead letter's reason), not the sender's
		}
		s, ok := v.(string)
		if !ok {
			b, _ := json.Marshal(v)
			s = string(b)
		}
		dt := types[n]
		if dt == "" || !dataTypeRe.MatchString(dt) {
			dt = "String"
		}
		if sqsmd5.IsBinary(dt) {
			if b, err := base64.StdEncoding.DecodeString(s); err == nil && len(b) > 0 {
				out[n] = attrValue{DataType: dt, BinaryValue: b}
				continue
			}
			dt = "String"
		}
		out[n] = attrValue{DataType: dt, StringValue: &s}
	}
	return out, trace
}

// md5OfAttributes is MD5OfMessageAttributes of attrs ("" for none).
func md5OfAttributes(attrs msgAttrMap) string {
	m := make(map[string]sqsmd5.Attribute, len(attrs))
	for n, a := range attrs {
		s := ""
		if a.StringValue != nil {
			s = *a.StringValue
		}
		m[n] = sqsmd5.Attribute{DataType: a.DataType, StringValue: s, BinaryValue: a.BinaryValue}
	}
	return sqsmd5.Attributes(m)
}

// md5OfTrace is MD5OfMessageSystemAttributes of an AWSTraceHeader.
func md5OfTrace(trace *string) string {
	if trace == nil {
		return ""
	}
	return sqsmd5.Attributes(map[string]sqsmd5.Attribute{"AWSTraceHeader": {DataType: "String", StringValue: *trace}})
}

// selectAttributes is the attributes of attrs that names asks for: every
// one for "All" or ".*", those starting with p for "p.*", and those named.
func selectAttributes(attrs msgAttrMap, names []string) msgAttrMap {
	out := msgAttrMap{}
	for n, a := range attrs {
		for _, want := range names {
			prefix, wild := strings.CutSuffix(want, ".*")
			if want == "All" || want == ".*" || want == n || (wild && strings.HasPrefix(n, prefix+".")) {
				out[n] = a
				break
			}
		}
	}
	return out
}

// validBody reports whether s holds only the characters SQS allows in a
// message: #x9, #xA, #xD, #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF
// (valid UTF-8, so no surrogates).
func validBody(s string) bool {
	for i, r := range s {
		switch {
		case r == 0x9, r == 0xA, r == 0xD:
		case r == 0xFFFD && !strings.HasPrefix(s[i:], "\uFFFD"): // invalid UTF-8
			return false
		case r >= 0x20 && r <= 0xD7FF, r >= 0xE000 && r <= 0xFFFD, r >= 0x10000 && r <= 0x10FFFF:
		default:
			return false
		}
	}
	return true
}
