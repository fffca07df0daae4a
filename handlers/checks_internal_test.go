package handlers

import (
	"strings"
	"testing"
)

// The checks of a request are all answered at once: one 400 whose errors
// name every invalid field, in the order they were found, and whose detail
// counts them; none is a nil error.
func TestChecksAnswerEveryField(t *testing.T) {
	var none checks
	if err := none.err(); err != nil {
		t.Fatalf("no checks failed, got %v", err)
	}
	var cs checks
	five, big := 5, 100
	cs.intRange("a", &five, 1, 10) // within: no error
	cs.intRange("b", &big, 1, 10)
	cs.intRange("c", nil, 1, 10) // absent: no error
	cs.attributes("attributes", map[string]string{"traceparent": "00-nothex"})
	cs.add("d", "is %s", "wrong")
	p, ok := cs.err().(*Problem)
	if !ok || p.Status != 400 || p.Code != codeInvalid {
		t.Fatalf("got %#v, want a 400 %s problem", cs.err(), codeInvalid)
	}
	var fields []string
	for _, e := range p.Errors {
		fields = append(fields, e.Field)
	}
	if got := strings.Join(fields, ","); got != "b,attributes.traceparent,d" {
		t.Errorf("fields %q, want b,attributes.traceparent,d", got)
	}
	if !strings.HasPrefix(p.Detail, "3 invalid fields; first: b: must be between 1 and 10") {
		t.Errorf("detail %q", p.Detail)
	}
	if safeText("a\x00b") || !safeText("ab") {
		t.Error("safeText must refuse NUL alone")
	}
}
