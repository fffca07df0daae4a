package push

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestDialControl(t *testing.T) {
	t.Parallel()
	tests := []struct {
		address string
		ok      bool
	}{
		{"127.0.0.1:80", false},
		{"[::1]:443", false},
		{"[::ffff:10.0.0.1]:80", false},
		{"[fe80::1%eth0]:80", false},
		{"169.254.169.254:80", false},
		{"not an address", false}, // fails closed
		{"example.com:80", false}, // a name never reaches Control; fail closed if it did
		{"8.8.8.8:443", true},
		{"[2606:4700:4700::1111]:443", true},
	}
	for _, tt := range tests {
		t.Run(tt.address, func(t *testing.T) {
			t.Parallel()
			err := dialControl("tcp", tt.address, nil)
			if tt.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrForbiddenAddress)
		})
	}
}

func TestClientDialTimeCheck(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	_, port, err := net.SplitHostPort(u.Host)
	require.NoError(t, err)

	get := func(c *http.Client, target string) (*http.Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		t.Cleanup(cancel)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		require.NoError(t, err)
		return c.Do(req)
	}

	tests := []struct {
		name   string
		target string
	}{
		{"IP literal", srv.URL + "/"},
		// A name is only resolved at dial time, as it would be after DNS
		// rebinding: the check must see the resolved loopback address.
		{"name resolving to loopback", fmt.Sprintf("http://localhost:%s/", port)},
	}
	for _, tt := range tests {
		t.Run("refused/"+tt.name, func(t *testing.T) {
			t.Parallel()
			resp, err := get(NewClient(false), tt.target)
			if resp != nil {
				resp.Body.Close()
			}
			require.Error(t, err)
			require.ErrorIs(t, err, ErrForbiddenAddress)
			require.Contains(t, err.Error(), "loopback")
		})
	}

	t.Run("allowPrivate reaches the server", func(t *testing.T) {
		t.Parallel()
		resp, err := get(NewClient(true), srv.URL+"/")
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
	})

	// Runs before srv.Close, after all subtests: only the allowPrivate
	// request got through.
	t.Cleanup(func() { require.Equal(t, int32(1), hits.Load()) })
}

func TestClientDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int32
	mux := http.NewServeMux()
	mux.HandleFunc("/hook/{code}", func(w http.ResponseWriter, r *http.Request) {
		code, err := strconv.Atoi(r.PathValue("code"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		http.Redirect(w, r, "/elsewhere", code)
	})
	mux.HandleFunc("/elsewhere", func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.WriteHeader(http.StatusOK)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	// Registered after srv.Close, so it runs first, once all subtests are done.
	t.Cleanup(func() { require.Zero(t, elsewhere.Load(), "/elsewhere must never be requested") })

	client := NewClient(true)
	for _, code := range []int{
		http.StatusFound,
		http.StatusMovedPermanently,
		http.StatusSeeOther,
		http.StatusTemporaryRedirect,
		http.StatusPermanentRedirect,
	} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, err := http.NewRequestWithContext(ctx, http.MethodPost,
				fmt.Sprintf("%s/hook/%d", srv.URL, code), strings.NewReader("{}"))
			require.NoError(t, err)
			resp, err := client.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, code, resp.StatusCode)
			require.Equal(t, "/elsewhere", resp.Header.Get("Location"))
		})
	}
}

func TestNewClientTransport(t *testing.T) {
	t.Parallel()
	for _, allowPrivate := range []bool{false, true} {
		t.Run(fmt.Sprint("allowPrivate=", allowPrivate), func(t *testing.T) {
			t.Parallel()
			c := NewClient(allowPrivate)
			require.Zero(t, c.Timeout, "callers bound deliveries with contexts")
			require.NotNil(t, c.CheckRedirect)
			require.ErrorIs(t, c.CheckRedirect(nil, nil), http.ErrUseLastResponse)
			tr, ok := c.Transport.(*http.Transport)
			require.True(t, ok, "own *http.Transport, got %T", c.Transport)
			require.NotSame(t, http.DefaultTransport, tr)
			require.Nil(t, tr.Proxy, "a proxy would bypass the dial-time check")
			require.NotNil(t, tr.DialContext)
			require.Equal(t, 64, tr.MaxIdleConnsPerHost)
			require.Equal(t, 90*time.Second, tr.IdleConnTimeout)
			require.Equal(t, 10*time.Second, tr.TLSHandshakeTimeout)
			require.Zero(t, tr.ResponseHeaderTimeout)
		})
	}
	require.NotSame(t, NewClient(false).Transport, NewClient(false).Transport)
}
