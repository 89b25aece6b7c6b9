package egress

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"sync"
	"time"
)

// CA is a session's own certificate authority: the gateway signs with it the certificates
// it shows code in the sandbox for the domains whose TLS it terminates (those that carry a
// secret). The sandbox trusts its certificate; its key stays on the server.
type CA struct {
	cert *x509.Certificate
	key  crypto.Signer
	pem  string // the certificate

	mu     sync.Mutex
	leaves map[string]*tls.Certificate // by host name
}

// caLife is how long a session's authority is valid: longer than any session lives.
const caLife = 400 * 24 * time.Hour

// maxLeaves bounds the certificates one CA keeps for reuse.
const maxLeaves = 256

// NewCA makes a new authority for session id.
func NewCA(id string) (*CA, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial(),
		Subject:               pkix.Name{Organization: []string{"cellbox"}, CommonName: "cellbox egress " + id},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caLife),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		BasicConstraintsValid: true,
		IsCA:                  true,
		MaxPathLenZero:        true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &CA{cert: cert, key: key, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})), leaves: map[string]*tls.Certificate{}}, nil
}

// CertPEM is the authority's certificate, for the sandbox's trust bundle.
func (c *CA) CertPEM() string { return c.pem }

// Marshal is the authority (certificate and key) in PEM, for the session's record.
func (c *CA) Marshal() (string, error) {
	der, err := x509.MarshalPKCS8PrivateKey(c.key)
	if err != nil {
		return "", err
	}
	return c.pem + string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})), nil
}

// ParseCA reads what Marshal wrote.
func ParseCA(s string) (*CA, error) {
	pair, err := tls.X509KeyPair([]byte(s), []byte(s))
	if err != nil {
		return nil, fmt.Errorf("session certificate authority: %w", err)
	}
	cert, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		return nil, err
	}
	key, ok := pair.PrivateKey.(crypto.Signer)
	if !ok || !cert.IsCA {
		return nil, errors.New("session certificate authority: not an authority")
	}
	return &CA{cert: cert, key: key, pem: string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: cert.Raw})), leaves: map[string]*tls.Certificate{}}, nil
}

// leaf is a certificate for host signed by the authority, made once and reused.
func (c *CA) leaf(host string) (*tls.Certificate, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l, ok := c.leaves[host]; ok && time.Until(l.Leaf.NotAfter) > time.Hour {
		return l, nil
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	until := now.Add(30 * 24 * time.Hour)
	if until.After(c.cert.NotAfter) {
		until = c.cert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial(),
		Subject:      pkix.Name{CommonName: host},
		DNSNames:     []string{host},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     until,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, c.cert, key.Public(), c.key)
	if err != nil {
		return nil, err
	}
	leaf, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	l := &tls.Certificate{Certificate: [][]byte{der, c.cert.Raw}, PrivateKey: key, Leaf: leaf}
	if len(c.leaves) >= maxLeaves {
		clear(c.leaves)
	}
	c.leaves[host] = l
	return l, nil
}

func serial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail
	}
	return n
}
