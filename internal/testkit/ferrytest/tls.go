package ferrytest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/ferry-mq/ferry/internal/server"
)

// WriteCertificate makes a new self-signed ECDSA certificate for
// 127.0.0.1 and localhost, valid for an hour, and writes it and its key
// as PEM to certFile and keyFile (for FERRY_TLS_CERT_FILE and
// FERRY_TLS_KEY_FILE). Each call makes a different certificate; it is its
// own root, so a client trusts it by adding it to its RootCAs.
func WriteCertificate(t testing.TB, certFile, keyFile string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "ferry test " + serial.Text(16)},
		NotBefore:             time.Now().Add(-time.Minute),
		NotAfter:              time.Now().Add(time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600))
	return cert
}

// WithTLS serves HTTPS with the certificate in certFile and keyFile.
func WithTLS(certFile, keyFile string) Option {
	return func(c *server.Config) { c.TLSCertFile, c.TLSKeyFile = certFile, keyFile }
}

// PeerCertificate opens a new TLS connection to addr, trusting roots and
// offering HTTP/2, and returns the certificate the server presented and
// the protocol negotiated.
func PeerCertificate(t testing.TB, addr string, roots *x509.CertPool) (*x509.Certificate, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d := &tls.Dialer{Config: &tls.Config{RootCAs: roots, NextProtos: []string{"h2", "http/1.1"}}}
	conn, err := d.DialContext(ctx, "tcp", addr)
	require.NoError(t, err)
	defer func() { _ = conn.Close() }()
	state := conn.(*tls.Conn).ConnectionState()
	require.NotEmpty(t, state.PeerCertificates)
	return state.PeerCertificates[0], state.NegotiatedProtocol
}

// Roots is a certificate pool of the given certificates.
func Roots(certs ...*x509.Certificate) *x509.CertPool {
	pool := x509.NewCertPool()
	for _, c := range certs {
		pool.AddCert(c)
	}
	return pool
}
