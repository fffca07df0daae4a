package server

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// certificate is the TLS certificate pair the server presents, read from
// FERRY_TLS_CERT_FILE and FERRY_TLS_KEY_FILE at start and again by reload
// (SIGHUP). Every handshake asks get for the pair of the moment, so a
// reload reaches new connections at once; open connections keep the pair
// they were made with. A pair that does not load is never stored: the
// previous one keeps serving.
type certificate struct {
	certFile, keyFile string
	current           atomic.Pointer[tls.Certificate]
}

// loadCertificate reads the pair, or says why it cannot (a missing or
// unreadable file, something that is not PEM, a key that is not the
// certificate's).
func loadCertificate(certFile, keyFile string) (*certificate, error) {
	c := &certificate{certFile: certFile, keyFile: keyFile}
	if _, err := c.reload(); err != nil {
		return nil, err
	}
	return c, nil
}

// reload reads the files again and, when they hold a valid pair, serves
// it from the next handshake on; it returns the pair it stored.
func (c *certificate) reload() (*tls.Certificate, error) {
	pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate (FERRY_TLS_CERT_FILE=%s, FERRY_TLS_KEY_FILE=%s): %w", c.certFile, c.keyFile, err)
	}
	c.current.Store(&pair)
	return &pair, nil
}

// get is the tls.Config's GetCertificate: the pair of the moment.
func (c *certificate) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return c.current.Load(), nil
}

// tlsConfig is the server's TLS configuration. net/http's ServeTLS adds
// HTTP/2 ("h2") and HTTP/1.1 to its protocols.
func (c *certificate) tlsConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: c.get}
}

// logCertificate says which certificate is now served, and warns when it
// has expired (clients will refuse it, but it is what the files hold).
func logCertificate(log *slog.Logger, msg string, pair *tls.Certificate) {
	leaf := pair.Leaf
	if leaf == nil {
		log.Info(msg)
		return
	}
	level := slog.LevelInfo
	if time.Now().After(leaf.NotAfter) {
		level, msg = slog.LevelWarn, msg+" (it has expired)"
	}
	log.Log(context.Background(), level, msg, "subject", leaf.Subject.String(), "not_after", leaf.NotAfter.UTC().Format(time.RFC3339))
}

// ReloadCertificate reads the TLS certificate files again (`ferry serve`
// and `ferry dev` call it on SIGHUP): connections made from now on get the
// new pair. A pair that does not load is logged as an error and returned,
// and the current pair keeps serving. Without TLS it does nothing.
func (s *Server) ReloadCertificate() error {
	if s.cert == nil {
		s.log.Info("no TLS certificate to reload (FERRY_TLS_CERT_FILE is not set)")
		return nil
	}
	pair, err := s.cert.reload()
	if err != nil {
		s.log.Error("TLS certificate not reloaded; the previous one is still served", "error", err)
		return err
	}
	logCertificate(s.log, "TLS certificate reloaded", pair)
	return nil
}
