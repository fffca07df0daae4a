package handlers

import (
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheckJSON(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[*strictReq]()
	for _, tc := range []struct {
		json  string
		field string // "" = accepted; "syntax" = left to encoding/json
	}{
		{`{"name":"a","items":[{"body":{"x":[1,{"y":null}]},"n":1}],"attrs":{"k":"v"},"push":{"url":"u"}}`, ""},
		{`{"NAME":"a"}`, "NAME"},
		{`{"name":"a","name":"b"}`, "body"},
		{`{"items":[{"body":1},{"Body":2}]}`, "items[1].Body"},
		{`{"items":[{"body":{"a":1,"b":{"c":1,"c":2}}}]}`, "items[0].body.b"},
		{`{"attrs":{"K":"1","k":"2"}}`, ""},
		{`{"attrs":{"k":"1","\u006b":"2"}}`, "attrs"},
		{`{"push":{"URL":"u"}}`, "push.URL"},
		{`{"push":null}`, ""},
		{`{"items":[{"body":"\u0000"}]}`, "items[0].body"},
		{`{"items":[{"body":{"\u0000":1}}]}`, "items[0].body"},
		{`{"items":[{"body":"\ud800"}]}`, "items[0].body"},
		{`{"items":[{"body":"\ud83d\ude00"}]}`, ""},
		{`{"items":[{"body":"\\u0000"}]}`, ""},
		{`{"items":[{"body":0e-16384}]}`, "items[0].body"},
		{`{"items":[{"body":[1e131071]}]}`, ""},
		{`{"items":[{"body":[1e131072]}]}`, "items[0].body[0]"},
		{`{"items":[{"n":1e-16384}]}`, "items[0].n"},
		{`{"name":"a"} x`, "syntax"},
		{`{"name":"a",}`, "syntax"},
		{`{"name":01}`, "syntax"},
		{`{"name":"\x"}`, "syntax"},
		{`{"name":"a` + "\n" + `"}`, "syntax"},
		{`{"items":[` + strings.Repeat("[", maxJSONDepth) + strings.Repeat("]", maxJSONDepth) + `]}`, "items[0][0]"},
		{`{"items":[{"body":` + strings.Repeat("[", MaxValueDepth) + strings.Repeat("]", MaxValueDepth) + `}]}`, ""},
		{`{"items":[{"body":` + strings.Repeat("[", MaxValueDepth+1) + strings.Repeat("]", MaxValueDepth+1) + `}]}`, "items[0].body"},
		{`{"items":[{"body":` + strings.Repeat(`{"a":`, MaxValueDepth+1) + "1" + strings.Repeat("}", MaxValueDepth+1) + `}]}`, "items[0].body"},
		{`[`, "syntax"},
		{`{"name":tru}`, "syntax"},
		{`{"name":"\u12"}`, "syntax"},
	} {
		err := checkJSON([]byte(tc.json), typ, "")
		switch tc.field {
		case "":
			require.NoError(t, err, abbreviate(tc.json))
		case "syntax":
			require.ErrorIs(t, err, errSyntax, abbreviate(tc.json))
		default:
			var p *Problem
			require.True(t, errors.As(err, &p), "%s: %v", abbreviate(tc.json), err)
			require.Equal(t, tc.field, p.Errors[0].Field, "%s: %s", abbreviate(tc.json), p.Detail)
		}
	}
}
