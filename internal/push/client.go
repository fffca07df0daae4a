package push

// SSRF protection for webhook push delivery.
//
// A push subscription makes Ferry send HTTP requests to a URL chosen by a
// client, from inside the network Ferry runs in. Left unchecked, that URL can
// reach things no client should: the cloud metadata service
// (169.254.169.254), the database, an admin port on localhost, anything on
// the private network. The defence has two layers and both are needed:
//
//   - CheckURL, when a subscription is created or changed: refuses
//     non-http(s) URLs, credentials in URLs, and hosts that are (or resolve
//     to) a forbidden address. This gives the client a clear 400 early.
//   - NewClient, at every delivery: its dialer's Control func checks the
//     IP actually being connected to, after DNS resolution. A name that
//     resolved to a public address at creation time and to 127.0.0.1 now
//     (DNS rebinding, or simply a changed record) is refused here. This is
//     the check that matters; the first is a courtesy.
//
// The client never follows redirects (a 3xx could point anywhere, and would
// be dialled without the creation-time check) and never uses a proxy (a
// proxy would do the dialling itself, so the Control check would only ever
// see the proxy's address).
//
// FERRY_ALLOW_PRIVATE_PUSH=true (allowPrivate here) turns both address
// checks off, for development and for deployments whose webhooks live on the
// private network. Scheme and syntax checks stay on.

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"syscall"
	"time"
)

// ErrForbiddenAddress is wrapped by the error a [NewClient] client returns
// when a delivery would connect to an address [ForbiddenAddr] refuses. Test for
// it with errors.Is; the *url.Error from http.Client.Do wraps it.
var ErrForbiddenAddress = errors.New("push address is forbidden")

// dialControl is the push dialer's Control func: it runs after DNS
// resolution, just before connect(2), with address as "ip:port" (IPv6 in
// brackets, possibly with a zone). It refuses forbidden IPs and, failing
// closed, anything it cannot parse.
func dialControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: cannot parse dial address %q: %v", ErrForbiddenAddress, address, err)
	}
	if reason, bad := ForbiddenAddr(ap.Addr()); bad {
		return fmt.Errorf("%w: %s is %s address", ErrForbiddenAddress, ap.Addr(), withArticle(reason))
	}
	return nil
}

// NewClient returns the http.Client for push deliveries. Build one per
// process (or per allowPrivate setting) and reuse it: it pools connections.
//
//   - It never follows redirects: CheckRedirect returns
//     http.ErrUseLastResponse, so a 3xx comes back to the caller as the
//     response (and is a delivery failure for it to judge).
//   - Its Transport is its own, never http.DefaultTransport, and has no
//     proxy: environment proxies (HTTP_PROXY etc.) are ignored, because a
//     proxy would connect on our behalf and bypass the dial-time check.
//     MaxIdleConnsPerHost is 64, IdleConnTimeout 90s, TLSHandshakeTimeout
//     10s; HTTP/2 is attempted as with the default transport.
//   - Unless allowPrivate, its net.Dialer has a Control func that checks
//     every IP actually dialled with [ForbiddenAddr] and fails the connection
//     with an error wrapping [ErrForbiddenAddress]. This is what defeats DNS
//     rebinding: the check sees the resolved address, not the name.
//   - It has no overall Timeout and no ResponseHeaderTimeout: callers bound
//     each delivery with the request's context.
//
// The caller sets User-Agent and any other headers on each request.
func NewClient(allowPrivate bool) *http.Client {
	dialer := &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
	}
	if !allowPrivate {
		dialer.Control = dialControl
	}
	transport := &http.Transport{
		Proxy:                 nil, // never a proxy: it would bypass dialControl
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: 1 * time.Second,
	}
	return &http.Client{
		Transport: transport,
		CheckRedirect: func(*http.Request, []*http.Request) error {
			return http.ErrUseLastResponse
		},
	}
}
