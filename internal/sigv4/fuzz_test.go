package sigv4

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// FuzzVerify feeds Verify raw HTTP requests, seeded with good signed ones
// (JSON, Query, presigned, an encoded path). Verify must never panic, and
// whatever it accepts the real SDK signer must sign to the very same
// signature: then the request is the one that was signed, judged by the
// SDK's canonicalisation rather than by Verify's own.
func FuzzVerify(f *testing.F) {
	for _, seed := range fuzzSeeds(f) {
		f.Add(seed)
	}
	f.Add([]byte("POST / HTTP/1.1\r\nHost: x\r\nAuthorization: AWS4-HMAC-SHA256 Credential=key_42/20260314/us-east-1/sqs/aws4_request, SignedHeaders=host, Signature=00\r\nX-Amz-Date: 20260314T150926Z\r\n\r\n"))
	f.Add([]byte("GET /?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=key_42%2F20260314%2Fus-east-1%2Fsqs%2Faws4_request HTTP/1.1\r\nHost: x\r\n\r\n"))
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := http.ReadRequest(bufio.NewReader(bytes.NewReader(raw)))
		if err != nil {
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err != nil {
			return
		}
		signed, err := testVerifier().Verify(r, body, signedAt)
		if err != nil {
			if e, ok := err.(*Error); !ok || e.Code == "" || e.Message == "" {
				t.Fatalf("Verify failed without an *Error carrying a code and message: %#v", err)
			}
			return
		}
		claimed, again := resignWithSDK(t, r, body, signed)
		if claimed != again {
			t.Fatalf("accepted a request the SDK signs differently:\n%q\nclaimed %s, SDK %s", raw, claimed, again)
		}
	})
}

// fuzzSeeds are good requests in wire format.
func fuzzSeeds(tb testing.TB) [][]byte {
	var seeds [][]byte
	add := func(r *http.Request) {
		var wire bytes.Buffer
		if err := r.Write(&wire); err != nil {
			tb.Fatal(err)
		}
		seeds = append(seeds, wire.Bytes())
	}
	s := defaultSigner()
	for _, build := range validRequests(tb) {
		r, body := build()
		s.sign(tb, r, body)
		add(r)
	}
	r, err := http.NewRequest(http.MethodGet, "http://localhost:8080/000000000000/orders?Action=ReceiveMessage&X-Amz-Expires=300", nil)
	if err != nil {
		tb.Fatal(err)
	}
	r, err = http.NewRequest(http.MethodGet, s.presign(tb, r, nil), nil)
	if err != nil {
		tb.Fatal(err)
	}
	add(r)
	return seeds
}

// resignWithSDK signs, with aws-sdk-go-v2's signer, a request made of only
// what r signed (its method, wire path, query, signed headers, body hash,
// date and scope) and returns r's signature and the SDK's.
func resignWithSDK(t *testing.T, r *http.Request, body []byte, signed Signed) (claimed, sdk string) {
	t.Helper()
	creds := aws.Credentials{AccessKeyID: signed.AccessKeyID, SecretAccessKey: testSecrets[signed.AccessKeyID]}
	path := r.URL.EscapedPath()
	if strings.HasPrefix(r.RequestURI, "/") {
		path, _, _ = strings.Cut(r.RequestURI, "?")
	}
	query := r.URL.Query()
	var signedHeaders string
	if signed.Presigned {
		claimed, signedHeaders = query.Get(qSignature), query.Get(qSignedHeaders)
		for _, k := range []string{qAlgorithm, qCredential, qDate, qSignedHeaders, qSignature} {
			query.Del(k)
		}
	} else {
		_, parts, _ := strings.Cut(r.Header.Get("Authorization"), " ")
		for part := range strings.SplitSeq(parts, ",") {
			switch k, v, _ := strings.Cut(strings.TrimSpace(part), "="); k {
			case "Signature":
				claimed = v
			case "SignedHeaders":
				signedHeaders = v
			}
		}
	}
	again := &http.Request{Method: r.Method, Host: r.Host, Header: http.Header{},
		URL: &url.URL{Opaque: "//" + r.Host + path, RawQuery: query.Encode()}}
	for name := range strings.SplitSeq(signedHeaders, ";") {
		switch name {
		case "host", "x-amz-date":
		case "content-length":
			again.ContentLength, _ = strconv.ParseInt(r.Header.Get(name), 10, 64)
		default:
			again.Header[http.CanonicalHeaderKey(name)] = r.Header.Values(name)
		}
	}
	hash := sha256Hex(body)
	signer := v4.NewSigner()
	if !signed.Presigned {
		if err := signer.SignHTTP(context.Background(), creds, again, hash, "sqs", signed.Region, signed.Time); err != nil {
			t.Fatal(err)
		}
		_, sdk, _ = strings.Cut(again.Header.Get("Authorization"), "Signature=")
		return claimed, sdk
	}
	u, _, err := signer.PresignHTTP(context.Background(), creds, again, hash, "sqs", signed.Region, signed.Time)
	if err != nil {
		t.Fatal(err)
	}
	pu, err := url.Parse(u)
	if err != nil {
		t.Fatal(err)
	}
	return claimed, pu.Query().Get(qSignature)
}
