package drivers

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"syscall"
)

// TLSFailure says how a TLS handshake failed ("presented a certificate
// that is not trusted", "failed the TLS handshake"), or returns "" when err
// is no TLS failure. Drivers use it, with DialFailure, to tell an operator
// why a downstream could not be reached.
func TLSFailure(err error) string {
	var (
		unknown x509.UnknownAuthorityError
		invalid x509.CertificateInvalidError
		host    x509.HostnameError
		verify  *tls.CertificateVerificationError
		header  tls.RecordHeaderError
		alert   tls.AlertError
	)
	switch {
	case errors.As(err, &unknown), errors.As(err, &invalid), errors.As(err, &host), errors.As(err, &verify):
		return "presented a certificate that is not trusted"
	case errors.As(err, &header), errors.As(err, &alert):
		return "failed the TLS handshake"
	}
	return ""
}

// DialFailure says why a connection could not be opened ("refused the
// connection", "could not be found: its host name did not resolve"), or
// returns "" when err is neither.
func DialFailure(err error) string {
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return "refused the connection"
	case errors.As(err, &dnsErr):
		return "could not be found: its host name did not resolve"
	}
	return ""
}
