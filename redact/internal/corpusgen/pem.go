package main

import (
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/base64"
	"encoding/binary"
	"encoding/pem"
	"math/big"
	"math/rand/v2"
	"strings"
)

// The key builders below lay random numbers out in the exact DER structure of each key type, so a
// block opens with the bytes a real key of that type opens with (MIIEowIBAAKCAQEA…,
// MIIEvQIBADANBgkqhkiG9w0BAQEFAASC…, MHcCAQEEI…, b3BlbnNzaC1rZXktdjE…) without being a usable key.
// Real key generation is avoided on purpose: crypto/rsa ignores a caller's random source, so the
// output could not be reproduced.

// randInt returns a positive integer of exactly n bytes (top bit set) when full is true, or of
// up to n bytes otherwise.
func randInt(r *rand.Rand, n int, full bool) *big.Int {
	b := randBytes(r, n)
	if full {
		b[0] |= 0x80
	}
	b[n-1] |= 1
	return new(big.Int).SetBytes(b)
}

// pkcs1RSA returns the DER of a 2048-bit PKCS #1 RSAPrivateKey.
func pkcs1RSA(r *rand.Rand) []byte {
	key := struct {
		Version                         int
		N, E, D, P, Q, Dp, Dq, QInverse *big.Int
	}{
		N:        randInt(r, 256, true),
		E:        big.NewInt(65537),
		D:        randInt(r, 256, false),
		P:        randInt(r, 128, true),
		Q:        randInt(r, 128, true),
		Dp:       randInt(r, 128, false),
		Dq:       randInt(r, 128, false),
		QInverse: randInt(r, 128, false),
	}
	der, err := asn1.Marshal(key)
	if err != nil {
		// Marshalling ints and big ints cannot fail.
		return nil
	}
	return der
}

// pkcs8RSA returns the DER of a PKCS #8 PrivateKeyInfo wrapping a 2048-bit RSA key, the form
// Google service account keys and openssl genpkey use.
func pkcs8RSA(r *rand.Rand) []byte {
	key := struct {
		Version    int
		Algorithm  pkix.AlgorithmIdentifier
		PrivateKey []byte
	}{
		Algorithm: pkix.AlgorithmIdentifier{
			Algorithm:  asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 1, 1},
			Parameters: asn1.NullRawValue,
		},
		PrivateKey: pkcs1RSA(r),
	}
	der, err := asn1.Marshal(key)
	if err != nil {
		return nil
	}
	return der
}

// sec1P256 returns the DER of a SEC 1 ECPrivateKey on P-256 with its public point.
func sec1P256(r *rand.Rand) []byte {
	pub := append([]byte{4}, randBytes(r, 64)...)
	key := struct {
		Version       int
		PrivateKey    []byte
		NamedCurveOID asn1.ObjectIdentifier `asn1:"optional,explicit,tag:0"`
		PublicKey     asn1.BitString        `asn1:"optional,explicit,tag:1"`
	}{
		Version:       1,
		PrivateKey:    randBytes(r, 32),
		NamedCurveOID: asn1.ObjectIdentifier{1, 2, 840, 10045, 3, 1, 7},
		PublicKey:     asn1.BitString{Bytes: pub, BitLength: len(pub) * 8},
	}
	der, err := asn1.Marshal(key)
	if err != nil {
		return nil
	}
	return der
}

// pemBlock returns the PEM encoding of der without the trailing newline, which is the part a
// redactor has to remove.
func pemBlock(typ string, der []byte) string {
	return strings.TrimSuffix(string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})), "\n")
}

// openSSHEd25519 returns an unencrypted OpenSSH ed25519 private key in the openssh-key-v1 format
// ssh-keygen writes, wrapped at 70 columns like ssh-keygen does.
func openSSHEd25519(r *rand.Rand) string {
	str := func(b []byte, s []byte) []byte {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		return append(b, s...)
	}
	pub := randBytes(r, 32)
	var pubBlob []byte
	pubBlob = str(pubBlob, []byte("ssh-ed25519"))
	pubBlob = str(pubBlob, pub)

	check := r.Uint32()
	var priv []byte
	priv = binary.BigEndian.AppendUint32(priv, check)
	priv = binary.BigEndian.AppendUint32(priv, check)
	priv = str(priv, []byte("ssh-ed25519"))
	priv = str(priv, pub)
	priv = str(priv, append(randBytes(r, 32), pub...))
	priv = str(priv, []byte(oneOf(r, "deploy@ci-runner-07", "maria@mbp-2023", "root@bastion-1", "svc-backup@db-03")))
	for i := byte(1); len(priv)%8 != 0; i++ {
		priv = append(priv, i)
	}

	var b []byte
	b = append(b, "openssh-key-v1\x00"...)
	b = str(b, []byte("none"))
	b = str(b, []byte("none"))
	b = str(b, nil)
	b = binary.BigEndian.AppendUint32(b, 1)
	b = str(b, pubBlob)
	b = str(b, priv)

	enc := base64.StdEncoding.EncodeToString(b)
	var out strings.Builder
	out.WriteString("-----BEGIN OPENSSH PRIVATE KEY-----\n")
	for len(enc) > 70 {
		out.WriteString(enc[:70] + "\n")
		enc = enc[70:]
	}
	out.WriteString(enc + "\n-----END OPENSSH PRIVATE KEY-----")
	return out.String()
}

// sshPublicKey returns an authorized_keys line body ("ssh-rsa AAAA…") for a random key.
func sshPublicKey(typ string, r *rand.Rand) string {
	str := func(b []byte, s []byte) []byte {
		b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
		return append(b, s...)
	}
	var blob []byte
	blob = str(blob, []byte(typ))
	if typ == "ssh-rsa" {
		blob = str(blob, []byte{1, 0, 1})
		n := randBytes(r, 256)
		n[0] |= 0x80
		blob = str(blob, append([]byte{0}, n...))
	} else {
		blob = str(blob, randBytes(r, 32))
	}
	return typ + " " + base64.StdEncoding.EncodeToString(blob)
}

// certificate returns a PEM CERTIFICATE block whose body opens like a DER X.509 certificate.
// Certificates are public, so they serve as long base64 that must not be redacted.
func certificate(r *rand.Rand) string {
	body := randBytes(r, 1000+r.IntN(400))
	der := append([]byte{0x30, 0x82, byte(len(body) >> 8), byte(len(body)), 0x30, 0x82, byte((len(body) - 270) >> 8), byte(len(body) - 270), 0xa0, 0x03, 0x02, 0x01, 0x02, 0x02, 0x10}, body...)
	return pemBlock("CERTIFICATE", der)
}
