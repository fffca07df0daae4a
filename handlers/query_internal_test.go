package handlers

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/labstack/echo/v4"
)

// An integer query parameter has one spelling, Ferry's, and lies within
// its bounds; absent, it is the default. queryParams refuses what a route
// does not take, and a parameter given twice.
func TestQueryIntOneSpelling(t *testing.T) {
	ctx := func(q string) echo.Context {
		return echo.New().NewContext(httptest.NewRequest(http.MethodGet, "/?"+q, nil), httptest.NewRecorder())
	}
	if v, err := queryInt(ctx(""), "limit", 7, 1, 10); err != nil || v != 7 {
		t.Errorf("absent: %d, %v; want the default 7", v, err)
	}
	if v, err := queryInt(ctx("limit=10"), "limit", 7, 1, 10); err != nil || v != 10 {
		t.Errorf("limit=10: %d, %v", v, err)
	}
	for _, q := range []string{"limit=", "limit=+5", "limit=05", "limit=-1", "limit=0", "limit=11", "limit=5.0", "limit=x"} {
		if _, err := queryInt(ctx(q), "limit", 7, 1, 10); err == nil {
			t.Errorf("%s: accepted", q)
		}
	}
	next := func(echo.Context) error { return nil }
	for q, ok := range map[string]bool{"": true, "limit=1": true, "limit=1&after=x": true,
		"other=1": false, "limit=1&limit=2": false, "limit=%zz": false} {
		err := queryParams("limit", "after")(next)(ctx(q))
		if (err == nil) != ok {
			t.Errorf("queryParams(limit, after) on %q: %v", q, err)
		}
	}
	if err := queryParams()(next)(ctx("limit=1")); err == nil {
		t.Error("a route that takes no parameter accepted one")
	}
}
