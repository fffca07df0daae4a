package handlers

import "testing"

// jsonbRefuses must refuse exactly what PostgreSQL's jsonb refuses (the
// HTTP tests check the same inputs against the real database).
func TestJSONBRefuses(t *testing.T) {
	for _, tc := range []struct {
		json    string
		refused bool
	}{
		{`{"a":1}`, false},
		{`"\u0000"`, true},
		{`"a\\u0000"`, false}, // an escaped backslash, then text
		{`"\ud83d\ude00"`, false},
		{`"\ud800"`, true},
		{`"\udc00x"`, true},
		{`"\ud800\u0041"`, true},
		{`[1e1000000]`, true},
		{`[1e-1000000]`, true},
		{`[1e400]`, false},
		{`[-12.5e-3]`, false},
		{`[0e-99999999]`, true},      // refused without asking whether PostgreSQL would take it
		{`{"k":"1e1000000"}`, false}, // a string, not a number
	} {
		if got := jsonbRefuses([]byte(tc.json)) != ""; got != tc.refused {
			t.Errorf("jsonbRefuses(%s) = %v, want %v", tc.json, got, tc.refused)
		}
	}
}
