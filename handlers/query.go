package handlers

import (
	"maps"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"github.com/labstack/echo/v4"
)

// queryInt reads an integer query parameter, def when absent. It must be
// written as Ferry writes integers (no sign, no leading zeros; not empty),
// so that an offset or limit has one spelling, and lie in [lo, hi].
// (queryParams has already refused a parameter given twice.)
func queryInt(c echo.Context, name string, def, lo, hi int64) (int64, error) {
	vs, ok := c.QueryParams()[name]
	if !ok {
		return def, nil
	}
	s := vs[0]
	v, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(v, 10) != s || v < lo || v > hi {
		return 0, invalid(name, "must be an integer between %d and %d, written without sign or leading zeros", lo, hi)
	}
	return v, nil
}

// queryParams refuses a query string that does not parse, names a
// parameter not in allowed, or names one twice.
func queryParams(allowed ...string) echo.MiddlewareFunc {
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			raw := c.Request().URL.RawQuery
			if raw == "" {
				return next(c)
			}
			q, err := url.ParseQuery(raw)
			if err != nil {
				return invalid("query", "is not a valid query string (%v)", err)
			}
			names := slices.Sorted(maps.Keys(q))
			for _, k := range names {
				if !slices.Contains(allowed, k) {
					if len(allowed) == 0 {
						return invalid(k, "unknown query parameter (this route takes none)")
					}
					return invalid(k, "unknown query parameter (this route takes %s)", strings.Join(allowed, ", "))
				}
				if len(q[k]) > 1 {
					return invalid(k, "is given more than once")
				}
			}
			return next(c)
		}
	}
}
