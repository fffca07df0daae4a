package main

import (
	"bytes"
	"context"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/testkit/ferrytest"
	"github.com/ferry-mq/ferry/internal/testkit/pgtest"
)

// `ferry serve` and `ferry dev` refuse one TLS file without the other,
// naming the one that is missing.
func TestServeRefusesHalfTLS(t *testing.T) {
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	ferrytest.WriteCertificate(t, certFile, keyFile)
	t.Setenv("FERRY_DATABASE_URL", "postgres://127.0.0.1:1/x")
	t.Setenv("FERRY_ADMIN_KEY", ferrytest.AdminKey)
	t.Setenv("FERRY_DATA_DIR", t.TempDir()) // dev writes its server key there
	for _, cmd := range []string{"serve", "dev"} {
		t.Setenv("FERRY_TLS_CERT_FILE", certFile)
		t.Setenv("FERRY_TLS_KEY_FILE", "")
		err := run(context.Background(), []string{cmd}, &bytes.Buffer{}, &bytes.Buffer{})
		require.ErrorContains(t, err, "FERRY_TLS_KEY_FILE is missing", cmd)

		t.Setenv("FERRY_TLS_CERT_FILE", "")
		t.Setenv("FERRY_TLS_KEY_FILE", keyFile)
		err = run(context.Background(), []string{cmd}, &bytes.Buffer{}, &bytes.Buffer{})
		require.ErrorContains(t, err, "FERRY_TLS_CERT_FILE is missing", cmd)
	}
}

var servingAddrRe = regexp.MustCompile(`msg="ferry serving" addr=(\S+)`)

// A real SIGHUP to `ferry serve` re-reads the certificate files: the next
// connection gets the new certificate. The test listens for SIGHUP itself
// too, so a signal that arrives before serve listens for it is caught
// here and not fatal to the test binary; it sends SIGHUP until the new
// certificate is served.
func TestServeReloadsCertificateOnSIGHUP(t *testing.T) {
	guard := make(chan os.Signal, 1)
	signal.Notify(guard, syscall.SIGHUP)
	defer signal.Stop(guard)

	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	first := ferrytest.WriteCertificate(t, certFile, keyFile)
	t.Setenv("FERRY_DATABASE_URL", pgtest.NewDatabase(t))
	t.Setenv("FERRY_ADMIN_KEY", ferrytest.AdminKey)
	t.Setenv("FERRY_LISTEN", "127.0.0.1:0")
	t.Setenv("FERRY_LOG_LEVEL", "info")
	t.Setenv("FERRY_TLS_CERT_FILE", certFile)
	t.Setenv("FERRY_TLS_KEY_FILE", keyFile)

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr ferrytest.LogBuffer
	done := make(chan error, 1)
	go func() { done <- run(ctx, []string{"serve"}, &bytes.Buffer{}, &stderr) }()
	var addr string
	require.Eventually(t, func() bool {
		m := servingAddrRe.FindStringSubmatch(stderr.String())
		if m != nil {
			addr = m[1]
		}
		return m != nil
	}, 30*time.Second, 10*time.Millisecond, "ferry serve never logged its address:\n%s", stderr.String())

	// Both are trusted: only which one is presented changes.
	newCert, newKey := filepath.Join(dir, "new-cert.pem"), filepath.Join(dir, "new-key.pem")
	second := ferrytest.WriteCertificate(t, newCert, newKey)
	roots := ferrytest.Roots(first, second)
	got, proto := ferrytest.PeerCertificate(t, addr, roots)
	require.True(t, got.Equal(first))
	require.Equal(t, "h2", proto)

	require.NoError(t, os.Rename(newKey, keyFile))
	require.NoError(t, os.Rename(newCert, certFile))
	require.Eventually(t, func() bool {
		require.NoError(t, syscall.Kill(os.Getpid(), syscall.SIGHUP))
		got, _ := ferrytest.PeerCertificate(t, addr, roots)
		return got.Equal(second)
	}, 30*time.Second, 20*time.Millisecond, "SIGHUP never brought the new certificate:\n%s", stderr.String())
	require.Contains(t, stderr.String(), "TLS certificate reloaded")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("ferry serve did not stop")
	}
}
