package server_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/openapi/openapitest"
)

// tlsFiles are a certificate and key file in a test's directory.
func tlsFiles(t *testing.T) (certFile, keyFile string) {
	dir := t.TempDir()
	return filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
}

// tlsClient trusts roots, speaks HTTP/2 when the server offers it, and
// checks every response against the spec.
func tlsClient(t *testing.T, roots *x509.CertPool) *http.Client {
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots}, ForceAttemptHTTP2: true}
	t.Cleanup(tr.CloseIdleConnections)
	return openapitest.New(t).Client(t, tr)
}

// With FERRY_TLS_CERT_FILE and FERRY_TLS_KEY_FILE the API is HTTPS with
// HTTP/2 negotiated, requests with bodies included, and plain HTTP to the
// port gets no answer from Ferry.
func TestTLSServesHTTP2(t *testing.T) {
	t.Parallel()
	certFile, keyFile := tlsFiles(t)
	cert := ferrytest.WriteCertificate(t, certFile, keyFile)
	env := ferrytest.Start(t, ferrytest.WithTLS(certFile, keyFile))
	require.True(t, strings.HasPrefix(env.URL, "https://127.0.0.1:"), env.URL)
	client := tlsClient(t, ferrytest.Roots(cert))

	do := func(method, path, body string) (int, string) {
		req, err := http.NewRequest(method, env.URL+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+ferrytest.AdminKey)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := client.Do(req)
		require.NoError(t, err)
		answer, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		require.Equal(t, 2, resp.ProtoMajor, "%s %s over %s", method, path, resp.Proto)
		require.True(t, resp.TLS.PeerCertificates[0].Equal(cert))
		return resp.StatusCode, string(answer)
	}
	status, _ := do("GET", "/healthz", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = do("PUT", "/v1/queues/tls", "")
	require.Equal(t, http.StatusCreated, status)
	status, _ = do("POST", "/v1/queues/tls/messages", `{"messages":[{"body":"over h2"}]}`)
	require.Equal(t, http.StatusCreated, status)
	status, body := do("POST", "/v1/queues/tls/receive", `{"max_messages":1}`)
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, body, "over h2")

	// net/http answers a plain request on the TLS port itself.
	plain, err := http.Get("http://" + env.Server.Addr() + "/healthz")
	require.NoError(t, err)
	text, err := io.ReadAll(plain.Body)
	require.NoError(t, err)
	require.NoError(t, plain.Body.Close())
	require.Equal(t, http.StatusBadRequest, plain.StatusCode)
	require.Contains(t, string(text), "HTTPS server")
	require.Empty(t, plain.Header.Get("X-Request-Id"), "Ferry's handlers never saw it")
}

// ReloadCertificate (SIGHUP) serves the files' new pair to the next
// connection; a pair that does not load is an error and the pair in use
// stays.
func TestTLSReloadCertificate(t *testing.T) {
	t.Parallel()
	certFile, keyFile := tlsFiles(t)
	first := ferrytest.WriteCertificate(t, certFile, keyFile)
	env := ferrytest.Start(t, ferrytest.WithTLS(certFile, keyFile))
	addr := env.Server.Addr()
	otherCert, otherKey := tlsFiles(t)
	second := ferrytest.WriteCertificate(t, otherCert, otherKey)
	roots := ferrytest.Roots(first, second)

	got, proto := ferrytest.PeerCertificate(t, addr, roots)
	require.True(t, got.Equal(first))
	require.Equal(t, "h2", proto)

	copyFile(t, otherCert, certFile)
	copyFile(t, otherKey, keyFile)
	require.NoError(t, env.Server.ReloadCertificate())
	got, _ = ferrytest.PeerCertificate(t, addr, roots)
	require.True(t, got.Equal(second), "a new connection gets the reloaded certificate")

	// A certificate whose key is another's, then files that are not PEM,
	// then no files: each is refused, and the second pair serves on.
	ferrytest.WriteCertificate(t, certFile, otherKey)
	require.ErrorContains(t, env.Server.ReloadCertificate(), "FERRY_TLS_CERT_FILE")
	require.NoError(t, os.WriteFile(certFile, []byte("not a certificate"), 0o600))
	require.NoError(t, os.WriteFile(keyFile, []byte("not a key"), 0o600))
	require.Error(t, env.Server.ReloadCertificate())
	require.NoError(t, os.Remove(certFile))
	require.Error(t, env.Server.ReloadCertificate())
	got, _ = ferrytest.PeerCertificate(t, addr, roots)
	require.True(t, got.Equal(second), "a bad pair keeps the current one")
	resp, err := tlsClient(t, roots).Get(env.URL + "/healthz")
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
}

func copyFile(t *testing.T, from, to string) {
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o600))
}

// One TLS file without the other, or files that do not hold a pair, stop
// the start with the variable's name; the database is not touched.
func TestTLSStartupErrors(t *testing.T) {
	t.Parallel()
	certFile, keyFile := tlsFiles(t)
	ferrytest.WriteCertificate(t, certFile, keyFile)
	otherCert, otherKey := tlsFiles(t)
	ferrytest.WriteCertificate(t, otherCert, otherKey)
	garbage := filepath.Join(t.TempDir(), "garbage.pem")
	require.NoError(t, os.WriteFile(garbage, []byte("-----BEGIN NOTHING-----\n"), 0o600))
	unreadable := t.TempDir() // a directory: unreadable as a file, for root too

	for _, tc := range []struct {
		name, cert, key string
		want            []string
	}{
		{"cert without key", certFile, "", []string{"FERRY_TLS_KEY_FILE is missing"}},
		{"key without cert", "", keyFile, []string{"FERRY_TLS_CERT_FILE is missing"}},
		{"no such file", certFile + ".gone", keyFile, []string{"FERRY_TLS_CERT_FILE=" + certFile + ".gone", "no such file"}},
		{"not PEM", garbage, keyFile, []string{"FERRY_TLS_CERT_FILE=" + garbage}},
		{"unreadable key", certFile, unreadable, []string{"FERRY_TLS_KEY_FILE=" + unreadable, "is a directory"}},
		{"key of another certificate", certFile, otherKey, []string{"private key does not match"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := server.DefaultConfig()
			// Nothing listens there: an error about it would mean the
			// database was tried first.
			cfg.DatabaseURL, cfg.AdminKey = "postgres://127.0.0.1:1/none?connect_timeout=1", ferrytest.AdminKey
			cfg.Listen, cfg.TLSCertFile, cfg.TLSKeyFile = "127.0.0.1:0", tc.cert, tc.key
			_, err := server.New(context.Background(), cfg, slog.New(slog.DiscardHandler))
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}
