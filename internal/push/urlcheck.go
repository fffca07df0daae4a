package push

// The creation-time check of a push URL ([CheckURL]) and the table of
// addresses no push may reach ([ForbiddenAddr]), which the client's
// dial-time check ([NewClient]) applies too. Why both: see client.go.

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// MaxURLLen is the longest push URL [CheckURL] accepts, in bytes.
const MaxURLLen = 2048

// addrRule names a block of addresses and why it is forbidden.
type addrRule struct {
	prefix netip.Prefix
	reason string
}

func addrRules(reasonByPrefix ...string) []addrRule {
	out := make([]addrRule, 0, len(reasonByPrefix)/2)
	for i := 0; i < len(reasonByPrefix); i += 2 {
		out = append(out, addrRule{netip.MustParsePrefix(reasonByPrefix[i]), reasonByPrefix[i+1]})
	}
	return out
}

// forbidden4 is checked in order; the first match gives the reason. Sources:
// the IANA IPv4 Special-Purpose Address Registry (RFC 6890 and updates).
// Blocks there that are globally reachable anycast services (AS112, AMT)
// are deliberately absent.
var forbidden4 = addrRules( //nolint:gochecknoglobals // a fixed table, read only
	"0.0.0.0/32", "unspecified",
	"255.255.255.255/32", "broadcast",
	"0.0.0.0/8", "reserved", // "this network" (RFC 791)
	"127.0.0.0/8", "loopback",
	"10.0.0.0/8", "private", // RFC 1918
	"172.16.0.0/12", "private", // RFC 1918
	"192.168.0.0/16", "private", // RFC 1918
	"100.64.0.0/10", "private", // shared address space / CGNAT (RFC 6598)
	"169.254.0.0/16", "link-local", // includes 169.254.169.254, cloud metadata
	"224.0.0.0/4", "multicast",
	"192.0.2.0/24", "documentation", // TEST-NET-1
	"198.51.100.0/24", "documentation", // TEST-NET-2
	"203.0.113.0/24", "documentation", // TEST-NET-3
	"198.18.0.0/15", "benchmarking", // RFC 2544
	"192.0.0.0/24", "reserved", // IETF protocol assignments
	"192.88.99.0/24", "reserved", // deprecated 6to4 relay anycast
	"240.0.0.0/4", "reserved", // future use
)

// forbidden6 is checked in order after the embedded-IPv4 forms (IPv4-mapped,
// IPv4-compatible, NAT64, 6to4) have been handled by ForbiddenAddr. Anything
// outside global unicast 2000::/3 that is not listed is refused as
// "reserved" afterwards, so this list only needs the named classes and the
// special blocks inside 2000::/3.
var forbidden6 = addrRules( //nolint:gochecknoglobals // a fixed table, read only
	"::/128", "unspecified",
	"::1/128", "loopback",
	"ff00::/8", "multicast",
	"fe80::/10", "link-local",
	"fc00::/7", "private", // unique local addresses (RFC 4193)
	"fec0::/10", "site-local", // deprecated (RFC 3879), still not global
	"2001:db8::/32", "documentation",
	"3fff::/20", "documentation", // RFC 9637
	"2001:2::/48", "benchmarking", // RFC 5180
	"2001::/23", "reserved", // IETF protocol assignments, incl. Teredo 2001::/32
)

//nolint:gochecknoglobals // fixed prefixes, read only
var (
	ipv4Compatible = netip.MustParsePrefix("::/96")        // deprecated ::a.b.c.d
	nat64          = netip.MustParsePrefix("64:ff9b::/96") // well-known NAT64 prefix (RFC 6052)
	sixToFour      = netip.MustParsePrefix("2002::/16")    // 6to4: 2002:AABB:CCDD::/48 embeds A.B.C.D
	// globalUnicast is all the IPv6 unicast space IANA hands out. Outside
	// it (apart from the cases above) is reserved, e.g. discard-only
	// 100::/64, local-use NAT64 64:ff9b:1::/48, SRv6 SIDs 5f00::/16.
	globalUnicast = netip.MustParsePrefix("2000::/3")
)

// ForbiddenAddr reports whether ip must not be dialled for a push delivery,
// and if so a one-word reason ("loopback", "private", "link-local",
// "unspecified", "multicast", "documentation", "benchmarking", "broadcast",
// "site-local", "reserved" or "invalid") for error messages.
//
// IPv4-mapped addresses (::ffff:a.b.c.d) are unmapped first. Addresses that
// embed an IPv4 address and route to it — IPv4-compatible ::a.b.c.d, NAT64
// 64:ff9b::/96 and 6to4 2002::/16 — are refused with the embedded address's
// reason when that one is forbidden, so ::ffff:127.0.0.1 and
// 64:ff9b::a00:1 (10.0.0.1) are as forbidden as the IPv4 address itself.
// Any IPv6 address outside global unicast 2000::/3 (other than NAT64 of a
// public IPv4 address) is refused as "reserved". A zone (fe80::1%eth0) is
// ignored. The zero netip.Addr is forbidden as "invalid".
//
// The lists follow the IANA special-purpose address registries; keep them in
// sync with the table in urlcheck_test.go.
func ForbiddenAddr(ip netip.Addr) (reason string, forbidden bool) {
	if !ip.IsValid() {
		return "invalid", true
	}
	ip = ip.WithZone("").Unmap()
	if ip.Is4() {
		for _, r := range forbidden4 {
			if r.prefix.Contains(ip) {
				return r.reason, true
			}
		}
		return "", false
	}

	// :: and ::1 lie inside ::/96 but have their own names.
	if ip.IsUnspecified() {
		return "unspecified", true
	}
	if ip.IsLoopback() {
		return "loopback", true
	}
	b := ip.As16()
	switch {
	case ipv4Compatible.Contains(ip):
		if reason, bad := ForbiddenAddr(netip.AddrFrom4([4]byte(b[12:16]))); bad {
			return reason, true
		}
		return "reserved", true // deprecated since RFC 4291; nothing legitimate uses it
	case nat64.Contains(ip):
		return ForbiddenAddr(netip.AddrFrom4([4]byte(b[12:16])))
	case sixToFour.Contains(ip):
		if reason, bad := ForbiddenAddr(netip.AddrFrom4([4]byte(b[2:6]))); bad {
			return reason, true
		}
	}
	for _, r := range forbidden6 {
		if r.prefix.Contains(ip) {
			return r.reason, true
		}
	}
	if !globalUnicast.Contains(ip) {
		return "reserved", true
	}
	return "", false
}

// URLError is the error [CheckURL] returns for a URL it refuses. Reason is
// a short sentence meant for the client, suitable as the detail of a 400
// problem response, e.g. "push.url resolves to a private address
// (10.0.0.5)". Err, when not nil, is the underlying cause (a parse or
// resolver error) for logs and errors.Is; it is not part of Error(), so
// resolver internals do not leak to clients.
type URLError struct {
	Reason string
	Err    error
}

// Error returns Reason.
func (e *URLError) Error() string { return e.Reason }

// Unwrap returns Err.
func (e *URLError) Unwrap() error { return e.Err }

// LookupFunc resolves a host name to IP addresses. [CheckURL] takes one so
// tests (and callers with their own resolver) can control resolution; nil
// means net.DefaultResolver.LookupNetIP(ctx, "ip", host).
type LookupFunc func(ctx context.Context, host string) ([]netip.Addr, error)

func defaultLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

func urlErr(err error, format string, args ...any) *URLError {
	return &URLError{Reason: fmt.Sprintf(format, args...), Err: err}
}

// withArticle returns reason with its indefinite article: "a private", "an unspecified".
func withArticle(reason string) string {
	if reason != "" && strings.ContainsRune("aeiou", rune(reason[0])) {
		return "an " + reason
	}
	return "a " + reason
}

// CheckURL validates a push URL when a subscription is created or
// changed. It accepts an absolute http or https URL of at most [MaxURLLen]
// bytes with a host, an optional valid port, no user info (credentials in
// URLs are refused: they would be logged and shown back) and no fragment.
//
// Unless allowPrivate is set, it also checks where the URL points: an IP
// literal host must pass [ForbiddenAddr]; "localhost" and names under
// ".localhost" are refused without resolving (RFC 6761); any other name is
// resolved with lookup (net.DefaultResolver when nil) under ctx, must
// resolve, and every address it resolves to must pass ForbiddenAddr — one
// bad address is enough to refuse, since the dialer may pick any of them.
// Hosts whose last label is numeric ("127.1", "0x7f.1", "2130706433") are
// refused as non-standard IPv4 notation that some resolvers accept.
//
// Passing this check does not make later deliveries safe: the name may
// resolve elsewhere by then. [NewClient] checks again at dial time.
//
// Every error is a [*URLError].
func CheckURL(ctx context.Context, raw string, allowPrivate bool, lookup LookupFunc) error {
	if len(raw) > MaxURLLen {
		return urlErr(nil, "push.url is longer than %d bytes", MaxURLLen)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return urlErr(err, "push.url is not a valid URL")
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return urlErr(nil, "push.url must be an absolute http or https URL")
	}
	if u.Opaque != "" || u.Host == "" {
		return urlErr(nil, "push.url must have a host")
	}
	if u.User != nil {
		return urlErr(nil, "push.url must not contain credentials")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return urlErr(nil, "push.url must not contain a fragment")
	}
	host := u.Hostname()
	if host == "" {
		return urlErr(nil, "push.url must have a host")
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return urlErr(err, "push.url has an invalid port")
		}
	}
	if allowPrivate {
		return nil
	}

	if ip, err := netip.ParseAddr(host); err == nil {
		if reason, bad := ForbiddenAddr(ip); bad {
			return urlErr(nil, "push.url points to %s address (%s)", withArticle(reason), ip)
		}
		return nil
	}
	name := strings.TrimSuffix(strings.ToLower(host), ".")
	if name == "localhost" || strings.HasSuffix(name, ".localhost") {
		return urlErr(nil, "push.url points to a loopback address (%s)", host)
	}
	if numericLastLabel(name) {
		return urlErr(nil, "push.url host %q is not a valid host name or IP address", host)
	}
	if lookup == nil {
		lookup = defaultLookup
	}
	addrs, err := lookup(ctx, host)
	if err != nil || len(addrs) == 0 {
		return urlErr(err, "push.url host %q does not resolve", host)
	}
	for _, ip := range addrs {
		if reason, bad := ForbiddenAddr(ip); bad {
			return urlErr(nil, "push.url resolves to %s address (%s)", withArticle(reason), ip)
		}
	}
	return nil
}

// numericLastLabel reports whether the last label of a host name is a
// number (decimal, or hex with 0x). No real top-level domain is; such hosts
// are IPv4 addresses in a legacy notation (inet_aton) that the URL parser
// does not treat as IP literals but a libc resolver may.
func numericLastLabel(name string) bool {
	label := name[strings.LastIndexByte(name, '.')+1:]
	if label == "" {
		return false
	}
	if strings.HasPrefix(label, "0x") {
		label = label[2:]
		if label == "" {
			return true
		}
		for _, c := range label {
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
				return false
			}
		}
		return true
	}
	for _, c := range label {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}
