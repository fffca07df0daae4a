package push

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestForbiddenAddr(t *testing.T) {
	t.Parallel()
	tests := []struct {
		ip     string
		reason string // "" = allowed
	}{
		// loopback
		{"127.0.0.1", "loopback"},
		{"127.1.2.3", "loopback"},
		{"::1", "loopback"},
		// private: RFC 1918, CGNAT, ULA
		{"10.1.2.3", "private"},
		{"172.16.0.1", "private"},
		{"172.31.255.255", "private"},
		{"192.168.1.1", "private"},
		{"100.64.0.1", "private"},
		{"100.127.255.255", "private"},
		{"fc00::1", "private"},
		{"fd12::1", "private"},
		// link-local, including cloud metadata
		{"169.254.169.254", "link-local"},
		{"169.254.0.1", "link-local"},
		{"fe80::1", "link-local"},
		{"fe80::1%eth0", "link-local"},
		// unspecified, broadcast, multicast
		{"0.0.0.0", "unspecified"},
		{"::", "unspecified"},
		{"255.255.255.255", "broadcast"},
		{"224.0.0.1", "multicast"},
		{"239.255.255.250", "multicast"},
		{"ff02::1", "multicast"},
		{"ff0e::1", "multicast"},
		// documentation
		{"192.0.2.1", "documentation"},
		{"198.51.100.7", "documentation"},
		{"203.0.113.9", "documentation"},
		{"2001:db8::1", "documentation"},
		{"3fff::1", "documentation"},
		// benchmarking
		{"198.18.0.1", "benchmarking"},
		{"198.19.255.255", "benchmarking"},
		{"2001:2::1", "benchmarking"},
		// reserved
		{"240.0.0.1", "reserved"},
		{"0.1.2.3", "reserved"},
		{"192.0.0.8", "reserved"},
		{"192.88.99.1", "reserved"},
		{"2001::1", "reserved"},          // Teredo
		{"100::1", "reserved"},           // discard-only
		{"64:ff9b:1::a00:1", "reserved"}, // local-use NAT64
		{"::ffff:0:808:808", "reserved"}, // IPv4-translated (SIIT), outside 2000::/3
		{"fec0::1", "site-local"},
		// IPv4-mapped, IPv4-compatible, NAT64 and 6to4 forms
		{"::ffff:127.0.0.1", "loopback"},
		{"::ffff:10.0.0.1", "private"},
		{"::ffff:169.254.169.254", "link-local"},
		{"::127.0.0.1", "loopback"},
		{"::10.0.0.1", "private"},
		{"::8.8.8.8", "reserved"},            // deprecated IPv4-compatible, even if public
		{"64:ff9b::a00:1", "private"},        // NAT64 of 10.0.0.1
		{"64:ff9b::7f00:1", "loopback"},      // NAT64 of 127.0.0.1
		{"64:ff9b::a9fe:a9fe", "link-local"}, // NAT64 of 169.254.169.254
		{"2002:a00:1::1", "private"},         // 6to4 of 10.0.0.1
		{"2002:7f00:1::1", "loopback"},       // 6to4 of 127.0.0.1
		// allowed
		{"8.8.8.8", ""},
		{"1.1.1.1", ""},
		{"172.32.0.1", ""},
		{"172.15.255.255", ""},
		{"100.128.0.1", ""},
		{"100.63.255.255", ""},
		{"192.0.3.1", ""},
		{"198.20.0.1", ""},
		{"223.255.255.255", ""},
		{"2606:4700:4700::1111", ""},
		{"2001:4860:4860::8888", ""},
		{"::ffff:8.8.8.8", ""},
		{"64:ff9b::808:808", ""}, // NAT64 of 8.8.8.8
		{"2002:808:808::1", ""},  // 6to4 of 8.8.8.8
	}
	for _, tt := range tests {
		t.Run(tt.ip, func(t *testing.T) {
			t.Parallel()
			ip, err := netip.ParseAddr(tt.ip)
			require.NoError(t, err)
			reason, forbidden := ForbiddenAddr(ip)
			require.Equal(t, tt.reason != "", forbidden, "reason %q", reason)
			require.Equal(t, tt.reason, reason)
		})
	}

	t.Run("zero Addr", func(t *testing.T) {
		t.Parallel()
		reason, forbidden := ForbiddenAddr(netip.Addr{})
		require.True(t, forbidden)
		require.Equal(t, "invalid", reason)
	})
}

// staticLookup resolves every name from a fixed table; unknown names fail
// like NXDOMAIN. It records the names it was asked for.
type staticLookup struct {
	addrs map[string][]string
	asked atomic.Int32
}

func (s *staticLookup) lookup(_ context.Context, host string) ([]netip.Addr, error) {
	s.asked.Add(1)
	raw, ok := s.addrs[host]
	if !ok {
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	}
	out := make([]netip.Addr, 0, len(raw))
	for _, r := range raw {
		out = append(out, netip.MustParseAddr(r))
	}
	return out, nil
}

func TestCheckURL(t *testing.T) {
	t.Parallel()
	dns := map[string][]string{
		"public.example":   {"8.8.8.8"},
		"public6.example":  {"2606:4700:4700::1111", "1.1.1.1"},
		"private.example":  {"10.0.0.1"},
		"mixed.example":    {"8.8.8.8", "1.1.1.1", "192.168.0.10"},
		"metadata.example": {"169.254.169.254"},
		"mapped.example":   {"::ffff:127.0.0.1"},
		"empty.example":    {},
	}
	tests := []struct {
		name         string
		url          string
		allowPrivate bool
		wantErr      string // substring of the error; "" = accepted
	}{
		// syntax and scheme
		{"ftp", "ftp://8.8.8.8/hook", false, "absolute http or https"},
		{"not a url", "not a url", false, "absolute http or https"},
		{"relative", "/hook", false, "absolute http or https"},
		{"scheme-relative", "//8.8.8.8/hook", false, "absolute http or https"},
		{"javascript", "javascript:alert(1)", false, "absolute http or https"},
		{"unparsable", "http://[::1/", false, "not a valid URL"},
		{"missing host", "http:///hook", false, "must have a host"},
		{"opaque", "http:8.8.8.8", false, "must have a host"},
		{"port only", "http://:80/hook", false, "must have a host"},
		{"bad port", "http://8.8.8.8:70000/", false, "invalid port"},
		{"port zero", "http://8.8.8.8:0/", false, "invalid port"},
		{"user and password", "https://user:pass@8.8.8.8/hook", false, "credentials"},
		{"user only", "https://token@8.8.8.8/hook", false, "credentials"},
		{"fragment", "https://8.8.8.8/hook#frag", false, "fragment"},
		{"empty fragment", "https://8.8.8.8/hook#", false, "fragment"},
		{"too long", "https://8.8.8.8/" + strings.Repeat("a", MaxURLLen), false, "longer than"},

		// IP literals
		{"loopback", "http://127.0.0.1/", false, "push.url points to a loopback address (127.0.0.1)"},
		{"loopback v6 with port", "http://[::1]:8080/", false, "loopback address (::1)"},
		{"metadata", "http://169.254.169.254/latest/meta-data", false, "link-local"},
		{"private", "http://10.0.0.1/", false, "push.url points to a private address (10.0.0.1)"},
		{"unspecified", "http://0.0.0.0/", false, "an unspecified address"},
		{"mapped loopback", "http://[::ffff:127.0.0.1]/", false, "loopback"},
		{"nat64 private", "http://[64:ff9b::a00:1]/", false, "private"},
		{"link-local zone", "http://[fe80::1%25eth0]/", false, "link-local"},
		{"public v4", "https://8.8.8.8/hook", false, ""},
		{"public v4 port query", "http://8.8.8.8:8080/hook?x=1", false, ""},
		{"public v6", "https://[2606:4700:4700::1111]/hook", false, ""},
		{"upper-case scheme", "HTTPS://8.8.8.8/hook", false, ""},

		// names
		{"localhost", "http://localhost/", false, "loopback"},
		{"localhost port", "http://localhost:8080/", false, "loopback"},
		{"localhost upper dot", "http://LOCALHOST./", false, "loopback"},
		{"sub.localhost", "http://api.localhost/", false, "loopback"},
		{"decimal ipv4", "http://2130706433/", false, "not a valid host"},
		{"short ipv4", "http://127.1/", false, "not a valid host"},
		{"hex ipv4", "http://0x7f.0.0.1/", false, "not a valid host"},
		{"resolves private", "https://private.example/hook", false, "push.url resolves to a private address (10.0.0.1)"},
		{"resolves metadata", "https://metadata.example/hook", false, "link-local address (169.254.169.254)"},
		{"resolves mapped", "https://mapped.example/hook", false, "loopback"},
		{"one of several private", "https://mixed.example/hook", false, "private address (192.168.0.10)"},
		{"does not resolve", "https://nxdomain.example/hook", false, "does not resolve"},
		{"no addresses", "https://empty.example/hook", false, "does not resolve"},
		{"resolves public", "https://public.example/hook", false, ""},
		{"resolves public v6 and v4", "https://public6.example:8443/hook", false, ""},

		// allowPrivate: syntax checks only
		{"allow loopback", "http://127.0.0.1:9/", true, ""},
		{"allow localhost", "http://localhost:9/", true, ""},
		{"allow private name", "http://private.example/", true, ""},
		{"allow unresolvable", "http://nxdomain.example/", true, ""},
		{"allow still refuses ftp", "ftp://127.0.0.1/", true, "absolute http or https"},
		{"allow still refuses credentials", "http://u:p@127.0.0.1/", true, "credentials"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			err := CheckURL(ctx, tt.url, tt.allowPrivate, (&staticLookup{addrs: dns}).lookup)
			if tt.wantErr == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			var uerr *URLError
			require.ErrorAs(t, err, &uerr)
			require.Contains(t, uerr.Reason, tt.wantErr)
			require.Equal(t, uerr.Reason, err.Error())
		})
	}

	t.Run("IP literals and localhost are not resolved", func(t *testing.T) {
		t.Parallel()
		sl := &staticLookup{addrs: dns}
		for _, u := range []string{"http://127.0.0.1/", "https://8.8.8.8/", "http://localhost/", "http://[::1]/"} {
			_ = CheckURL(context.Background(), u, false, sl.lookup)
		}
		require.Zero(t, sl.asked.Load())
	})

	t.Run("allowPrivate does not resolve", func(t *testing.T) {
		t.Parallel()
		sl := &staticLookup{addrs: dns}
		require.NoError(t, CheckURL(context.Background(), "https://private.example/", true, sl.lookup))
		require.Zero(t, sl.asked.Load())
	})

	t.Run("lookup error is wrapped", func(t *testing.T) {
		t.Parallel()
		lookup := func(ctx context.Context, host string) ([]netip.Addr, error) {
			return nil, context.DeadlineExceeded
		}
		err := CheckURL(context.Background(), "https://slow.example/", false, lookup)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		require.Equal(t, `push.url host "slow.example" does not resolve`, err.Error())
	})

	t.Run("nil lookup uses the default resolver", func(t *testing.T) {
		t.Parallel()
		// .invalid never resolves (RFC 6761), so this needs no network.
		err := CheckURL(context.Background(), "https://ferry-push-test.invalid/", false, nil)
		var uerr *URLError
		require.ErrorAs(t, err, &uerr)
		require.Contains(t, uerr.Reason, "does not resolve")
	})
}
