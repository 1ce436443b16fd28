package tlsutil

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// PEM is a certificate and its private key, PEM-encoded.
type PEM struct{ Cert, Key []byte }

// CreateCA makes a self-signed CA for cluster, valid for days.
func CreateCA(cluster string, days int) (PEM, error) {
	if days <= 0 {
		return PEM{}, errors.New("the validity must be at least one day")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, err
	}
	serial, err := serialNumber()
	if err != nil {
		return PEM{}, err
	}
	id := keyID(&key.PublicKey)
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "stickyd CA " + cluster, Organization: []string{"stickyd"}},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.AddDate(0, 0, days),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		SubjectKeyId:          id,
		AuthorityKeyId:        id,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return PEM{}, err
	}
	return encode(der, key)
}

// CertRequest is a certificate to sign.
type CertRequest struct {
	Role    Role
	Cluster string
	Days    int
	// DNSNames and IPs are added to the role's name, localhost and
	// 127.0.0.1.
	DNSNames []string
	IPs      []net.IP
}

// CreateCert makes a certificate of req's role signed by ca, usable both to
// serve and to dial (a server is both).
func CreateCert(ca PEM, req CertRequest) (PEM, error) {
	if req.Role != RoleServer && req.Role != RoleHost {
		return PEM{}, fmt.Errorf("unknown role %q (want server or host)", req.Role)
	}
	if req.Days <= 0 {
		return PEM{}, errors.New("the validity must be at least one day")
	}
	if req.Cluster == "" {
		req.Cluster = DefaultCluster
	}
	caCert, caKey, err := parse(ca)
	if err != nil {
		return PEM{}, fmt.Errorf("reading the CA: %w", err)
	}
	if !caCert.IsCA {
		return PEM{}, errors.New("the CA certificate is not a CA")
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return PEM{}, err
	}
	serial, err := serialNumber()
	if err != nil {
		return PEM{}, err
	}
	name := Name(req.Role, req.Cluster)
	now := time.Now()
	notAfter := now.AddDate(0, 0, req.Days)
	if notAfter.After(caCert.NotAfter) {
		notAfter = caCert.NotAfter
	}
	tmpl := &x509.Certificate{
		SerialNumber:   serial,
		Subject:        pkix.Name{CommonName: name, Organization: []string{"stickyd"}},
		NotBefore:      now.Add(-time.Minute),
		NotAfter:       notAfter,
		KeyUsage:       x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:    []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:       append([]string{name, "localhost"}, req.DNSNames...),
		IPAddresses:    append([]net.IP{net.IPv4(127, 0, 0, 1)}, req.IPs...),
		SubjectKeyId:   keyID(&key.PublicKey),
		AuthorityKeyId: caCert.SubjectKeyId,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
	if err != nil {
		return PEM{}, err
	}
	return encode(der, key)
}

func serialNumber() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
}

func keyID(pub *ecdsa.PublicKey) []byte {
	b, _ := x509.MarshalPKIXPublicKey(pub)
	sum := sha256.Sum256(b)
	return sum[:20]
}

func encode(der []byte, key *ecdsa.PrivateKey) (PEM, error) {
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return PEM{}, err
	}
	return PEM{
		Cert: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		Key:  pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb}),
	}, nil
}

func parse(p PEM) (*x509.Certificate, any, error) {
	cb, _ := pem.Decode(p.Cert)
	if cb == nil || cb.Type != "CERTIFICATE" {
		return nil, nil, errors.New("no PEM certificate")
	}
	cert, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	kb, _ := pem.Decode(p.Key)
	if kb == nil {
		return nil, nil, errors.New("no PEM private key")
	}
	var key any
	switch kb.Type {
	case "EC PRIVATE KEY":
		key, err = x509.ParseECPrivateKey(kb.Bytes)
	default:
		key, err = x509.ParsePKCS8PrivateKey(kb.Bytes)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("parsing the private key: %w", err)
	}
	return cert, key, nil
}
