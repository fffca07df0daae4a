package sigv4

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// Bounds on what a request may make Verify read, so that junk costs little.
// Each is far above what any SDK sends.
const (
	maxAuthorizationLen = 8 << 10 // the Authorization header, bytes
	maxCredentialLen    = 512     // X-Amz-Credential, bytes
	maxAccessKeyIDLen   = 128
	maxRegionLen        = 64
	maxSignedHeaders    = 64       // names in SignedHeaders
	maxHeaderBytes      = 64 << 10 // the values of the signed headers, together
	maxQueryLen         = 1 << 20  // the raw query string (Go's default header limit)
	maxQueryParams      = 1000
	maxExpires          = 7 * 24 * 60 * 60 // X-Amz-Expires, seconds (AWS's limit)
)

const (
	algorithm  = "AWS4-HMAC-SHA256"
	terminator = "aws4_request"
	timeFormat = "20060102T150405Z"
	dayFormat  = "20060102"
)

// Presigned query parameters.
const (
	qAlgorithm     = "X-Amz-Algorithm"
	qCredential    = "X-Amz-Credential"
	qDate          = "X-Amz-Date"
	qExpires       = "X-Amz-Expires"
	qSignedHeaders = "X-Amz-SignedHeaders"
	qSignature     = "X-Amz-Signature"
)

// auth is what a request claims about its signature, not yet checked.
type auth struct {
	presigned     bool
	credential    string // <key id>/<date>/<region>/<service>/aws4_request
	signedHeaders string
	signature     string
	amzDate       string
	expires       string // presigned only, "" when absent
}

// parseAuth finds the request's signature: the Authorization header or the
// presigned query parameters (exactly one of the two).
func parseAuth(r *http.Request, query url.Values) (auth, error) {
	headers := r.Header.Values("Authorization")
	presigned := query.Has(qAlgorithm) || query.Has(qCredential) || query.Has(qSignature)
	switch {
	case len(headers) == 0 && !presigned:
		return auth{}, newError(MissingAuthenticationToken, msgMissing)
	case len(headers) > 0 && presigned:
		return auth{}, incomplete("Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter or the Authorization header should be specified.")
	case len(headers) > 1:
		return auth{}, incomplete("%s Only one Authorization header is allowed.", msgIncomplete)
	case presigned:
		return parseQueryAuth(query)
	}
	return parseHeaderAuth(r, headers[0])
}

// parseHeaderAuth reads `AWS4-HMAC-SHA256 Credential=…, SignedHeaders=…,
// Signature=…` (parts in any order, commas with or without spaces) and the
// X-Amz-Date header.
func parseHeaderAuth(r *http.Request, value string) (auth, error) {
	if len(value) > maxAuthorizationLen {
		return auth{}, incomplete("%s The Authorization header is longer than %d bytes.", msgIncomplete, maxAuthorizationLen)
	}
	alg, rest, _ := strings.Cut(strings.TrimSpace(value), " ")
	if alg != algorithm {
		return auth{}, incomplete("Unsupported AWS 'algorithm': '%s'. Only '%s' is supported.", echo(alg), algorithm)
	}
	var a auth
	fields := map[string]*string{"Credential": &a.credential, "SignedHeaders": &a.signedHeaders, "Signature": &a.signature}
	seen := 0
	for part := range strings.SplitSeq(rest, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		dst := fields[k]
		if !ok || dst == nil || *dst != "" || v == "" {
			return auth{}, incomplete("%s Malformed Authorization header part '%s'.", msgIncomplete, echo(part))
		}
		*dst = v
		seen++
	}
	if seen != len(fields) {
		return auth{}, incomplete("Authorization header requires 'Credential', 'SignedHeaders' and 'Signature' parameters.")
	}
	dates := r.Header.Values("X-Amz-Date")
	if len(dates) != 1 {
		return auth{}, incomplete("Authorization header requires exactly one 'X-Amz-Date' header.")
	}
	a.amzDate = dates[0]
	return a, nil
}

// parseQueryAuth reads the X-Amz-* parameters of a presigned request.
func parseQueryAuth(query url.Values) (auth, error) {
	a := auth{presigned: true}
	var alg string
	for _, p := range []struct {
		name string
		dst  *string
	}{
		{qAlgorithm, &alg}, {qCredential, &a.credential}, {qDate, &a.amzDate},
		{qSignedHeaders, &a.signedHeaders}, {qSignature, &a.signature},
	} {
		v := query[p.name]
		if len(v) != 1 || v[0] == "" {
			return auth{}, incomplete("AWS query-string authentication requires exactly one non-empty '%s' parameter.", p.name)
		}
		*p.dst = v[0]
	}
	if alg != algorithm {
		return auth{}, incomplete("Unsupported AWS 'algorithm': '%s'. Only '%s' is supported.", echo(alg), algorithm)
	}
	if v := query[qExpires]; len(v) > 1 || (len(v) == 1 && v[0] == "") {
		return auth{}, incomplete("AWS query-string authentication allows one non-empty '%s' parameter.", qExpires)
	} else if len(v) == 1 {
		a.expires = v[0]
	}
	return a, nil
}

// scope is a checked credential.
type scope struct {
	accessKeyID string
	day         string // YYYYMMDD
	region      string
	service     string
	date        time.Time // from X-Amz-Date
	expires     time.Duration
}

// String is the credential scope as it appears in the string to sign.
func (s scope) String() string {
	return s.day + "/" + s.region + "/" + s.service + "/" + terminator
}

// checkCredential checks the claimed credential scope against the service and
// the X-Amz-Date, the way AWS words each refusal.
func checkCredential(a auth, service string) (scope, error) {
	date, err := time.Parse(timeFormat, a.amzDate)
	if err != nil || len(a.amzDate) != len(timeFormat) {
		return scope{}, incomplete("Date must be in ISO-8601 'basic format'. Got '%s'. See http://en.wikipedia.org/wiki/ISO_8601", echo(a.amzDate))
	}
	if len(a.credential) > maxCredentialLen {
		return scope{}, mismatch("Credential is longer than %d bytes.", maxCredentialLen)
	}
	parts := strings.Split(a.credential, "/")
	if len(parts) != 5 {
		return scope{}, mismatch("Credential must have the form <access key id>/<YYYYMMDD>/<region>/%s/%s, not '%s'.", service, terminator, echo(a.credential))
	}
	s := scope{accessKeyID: parts[0], day: parts[1], region: parts[2], service: parts[3], date: date}
	switch {
	case parts[4] != terminator:
		return scope{}, mismatch("Credential should be scoped with a valid terminator: '%s', not '%s'. ", terminator, echo(parts[4]))
	case s.service != service:
		return scope{}, mismatch("Credential should be scoped to correct service: '%s'. ", service)
	case !validRegion(s.region):
		return scope{}, mismatch("Credential should be scoped to a valid region, not '%s'. ", echo(s.region))
	case s.day != a.amzDate[:8]:
		return scope{}, mismatch("Date in Credential scope does not match YYYYMMDD from ISO-8601 version of date from HTTP: '%s' != '%s', from '%s'.", echo(s.day), a.amzDate[:8], a.amzDate)
	case s.accessKeyID == "" || len(s.accessKeyID) > maxAccessKeyIDLen:
		return scope{}, newError(InvalidClientTokenId, msgBadKey)
	}
	if a.presigned && a.expires != "" {
		n, err := strconv.Atoi(a.expires)
		if err != nil || n < 1 || n > maxExpires {
			return scope{}, incomplete("X-Amz-Expires must be a whole number of seconds from 1 to %d, not '%s'.", maxExpires, echo(a.expires))
		}
		s.expires = time.Duration(n) * time.Second
	}
	return s, nil
}

// validRegion accepts any region name a client may be configured with
// ("us-east-1", "local", "ferry"): 1–64 letters, digits, '-', '_' or '.'.
func validRegion(s string) bool {
	if s == "" || len(s) > maxRegionLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return false
		}
	}
	return true
}

func isAlnum(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
}

// echo makes client input safe to repeat in a message: at most 64 bytes,
// valid UTF-8, no control characters.
func echo(s string) string {
	cut := ""
	if len(s) > 64 {
		s, cut = s[:64], "…"
	}
	s = strings.ToValidUTF8(s, "\uFFFD")
	return strings.Map(func(r rune) rune {
		if r < 0x20 || r == 0x7f {
			return '?'
		}
		return r
	}, s) + cut
}
