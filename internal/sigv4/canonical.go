package sigv4

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// parseSignedHeaders checks SignedHeaders: lowercase header names joined by
// ';', sorted and distinct, `host` among them.
func parseSignedHeaders(s string) ([]string, error) {
	if strings.Count(s, ";") >= maxSignedHeaders {
		return nil, mismatch("SignedHeaders names more than %d headers.", maxSignedHeaders)
	}
	names := strings.Split(s, ";")
	for i, name := range names {
		if !validHeaderName(name) || (i > 0 && name <= names[i-1]) {
			return nil, mismatch("SignedHeaders must be distinct lowercase header names, sorted and separated by ';', not '%s'.", echo(s))
		}
	}
	if !slices.Contains(names, "host") {
		return nil, mismatch("'Host' or ':authority' must be a 'SignedHeader' in the AWS Authorization.")
	}
	return names, nil
}

// validHeaderName is a non-empty lowercase HTTP token.
func validHeaderName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// canonicalRequest builds the canonical request AWS defines, from the
// request as it arrived: method, path, query, the headers the client signed,
// their names, and the payload hash.
func canonicalRequest(r *http.Request, query url.Values, presigned bool, signed []string, payloadHash string) (string, error) {
	var b strings.Builder
	b.WriteString(r.Method)
	b.WriteByte('\n')
	b.WriteString(canonicalURI(r))
	b.WriteByte('\n')
	b.WriteString(canonicalQuery(query, presigned))
	b.WriteByte('\n')
	if err := writeCanonicalHeaders(&b, r, signed); err != nil {
		return "", err
	}
	b.WriteByte('\n')
	b.WriteString(strings.Join(signed, ";"))
	b.WriteByte('\n')
	b.WriteString(payloadHash)
	return b.String(), nil
}

// canonicalURI is the path exactly as the client sent it, URI-encoded once
// more. A client encodes each path segment once to send it and signs it
// encoded twice (every service but S3); so the server encodes the wire form
// once. The wire form is r.RequestURI on a server (r.URL would have decoded
// and re-encoded it, which differs for bytes such as raw UTF-8); a request
// built in-process has none, and then its URL's escaped path is what a Go
// client would send. The path is not normalised ("/a/./b", "//"): the
// verifier signs exactly the path the router will see.
func canonicalURI(r *http.Request) string {
	path := r.URL.EscapedPath()
	if strings.HasPrefix(r.RequestURI, "/") {
		path, _, _ = strings.Cut(r.RequestURI, "?")
	}
	if path == "" {
		path = "/"
	}
	return escape(path, true)
}

// canonicalQuery encodes every name and value, then sorts by name and value;
// a presigned request leaves out its own X-Amz-Signature.
func canonicalQuery(query url.Values, presigned bool) string {
	var pairs []string
	for name, values := range query {
		if presigned && name == qSignature {
			continue
		}
		for _, v := range values {
			pairs = append(pairs, escape(name, false)+"="+escape(v, false))
		}
	}
	slices.SortFunc(pairs, comparePairs)
	return strings.Join(pairs, "&")
}

// comparePairs orders by encoded name, then encoded value ("a=b" must not
// sort after "a-b=c" because '=' > '-').
func comparePairs(x, y string) int {
	xn, xv, _ := strings.Cut(x, "=")
	yn, yv, _ := strings.Cut(y, "=")
	if c := strings.Compare(xn, yn); c != 0 {
		return c
	}
	return strings.Compare(xv, yv)
}

// escape percent-encodes every byte but A–Z a–z 0–9 - _ . ~ (and '/' when
// keepSlash), with uppercase hex, as SigV4 requires.
func escape(s string, keepSlash bool) string {
	const hexDigits = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); i++ {
		c := s[i]
		if isAlnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || (keepSlash && c == '/') {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexDigits[c>>4])
		b.WriteByte(hexDigits[c&15])
	}
	return b.String()
}

// writeCanonicalHeaders writes `name:value\n` for each signed header: the
// values trimmed, runs of spaces collapsed, several values joined by ','.
func writeCanonicalHeaders(b *strings.Builder, r *http.Request, names []string) error {
	total := 0
	for _, name := range names {
		b.WriteString(name)
		b.WriteByte(':')
		for i, v := range headerValues(r, name) {
			if total += len(v); total > maxHeaderBytes {
				return mismatch("The signed headers' values are longer than %d bytes together.", maxHeaderBytes)
			}
			if i > 0 {
				b.WriteByte(',')
			}
			b.WriteString(trimValue(v))
		}
		b.WriteByte('\n')
	}
	return nil
}

// headerValues finds a signed header where Go keeps it: Host and (for a
// request built in-process) Content-Length and Transfer-Encoding live outside
// r.Header.
func headerValues(r *http.Request, name string) []string {
	if name == "host" {
		if r.Host != "" {
			return []string{r.Host}
		}
		return []string{r.URL.Host}
	}
	if v := r.Header.Values(name); len(v) > 0 {
		return v
	}
	switch {
	case name == "content-length" && r.ContentLength > 0:
		return []string{strconv.FormatInt(r.ContentLength, 10)}
	case name == "transfer-encoding" && len(r.TransferEncoding) > 0:
		return []string{strings.Join(r.TransferEncoding, ",")}
	}
	return nil
}

// trimValue trims a header value and collapses each run of spaces to one.
func trimValue(v string) string {
	v = strings.TrimSpace(v)
	if !strings.Contains(v, "  ") {
		return v
	}
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == ' ' && i > 0 && v[i-1] == ' ' {
			continue
		}
		b.WriteByte(v[i])
	}
	return b.String()
}

// stringToSign is what the signature is the HMAC of.
func stringToSign(amzDate string, s scope, canonical string) string {
	sum := sha256.Sum256([]byte(canonical))
	return algorithm + "\n" + amzDate + "\n" + s.String() + "\n" + hex.EncodeToString(sum[:])
}

// signingKey derives the key for one day, region and service from the
// secret, so that the secret itself signs nothing.
func signingKey(secret string, s scope) []byte {
	k := hmacSHA256([]byte("AWS4"+secret), s.day)
	k = hmacSHA256(k, s.region)
	k = hmacSHA256(k, s.service)
	return hmacSHA256(k, terminator)
}

func hmacSHA256(key []byte, data string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(data))
	return m.Sum(nil)
}
