// Package signingkey reads, and on a first start creates, the Ed25519 key
// a gateway signs its manifests with. It never imports gateway.
package signingkey

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"syscall"

	"github.com/toolgate/toolgate/config"
	"github.com/toolgate/toolgate/evidence"
	"github.com/toolgate/toolgate/internal/regularfile"
)

// Text is the manifest signing key as read from its source, and parsed:
// the gateway redacts both from everything it records.
type Text struct {
	File []byte
	Key  ed25519.PrivateKey
}

// ErrUnsigned is returned (wrapped) by PublicKey when the
// configuration says evidence.signing_key: none.
var ErrUnsigned = errors.New("gateway: evidence.signing_key: none: manifests are not signed")

// ErrNoKeyYet is returned (wrapped, beside fs.ErrNotExist) by
// PublicKey when the key file the gateway creates on its
// first start does not exist yet.
var ErrNoKeyYet = errors.New("gateway: no signing key yet: `toolgate serve` creates it on its first start")

// PublicKey returns the public key of the key the configuration
// signs manifests with, read as `toolgate serve` reads it but never
// created: ErrUnsigned for signing_key: none, ErrNoKeyYet when the
// file create: true names does not exist yet. Relative paths are taken from
// the current folder, as the gateway takes them.
func PublicKey(c config.Config, getenv func(string) string) (ed25519.PublicKey, error) {
	src := c.Evidence.SigningKey
	if src == nil || src.None {
		return nil, ErrUnsigned
	}
	if err := src.Validate(); err != nil {
		return nil, err
	}
	key, err := readSigningKey(src, getenv)
	if err != nil {
		return nil, err
	}
	return key.Key.Public().(ed25519.PublicKey), nil
}

// Load reads the configured signing key, creating the file first when
// create: true names one that does not exist, and logs which key signs. A
// nil source (a Config built in code without a key) and signing_key: none
// give a nil signer: unsigned manifests.
func Load(cfg config.Config, getenv func(string) string, log *slog.Logger) (*evidence.Signer, Text, error) {
	src := cfg.Evidence.SigningKey
	if src == nil || src.None {
		if src != nil {
			log.Warn("evidence.signing_key: none: manifests are unsigned, so nothing shows who wrote the evidence")
		}
		return nil, Text{}, nil
	}
	created := false
	if src.Create {
		var err error
		if created, err = createKeyFile(src.File); err != nil {
			return nil, Text{}, fmt.Errorf("config: evidence.signing_key.file %s: %w", src.File, err)
		}
	}
	key, err := readSigningKey(src, getenv)
	if err != nil {
		return nil, Text{}, err
	}
	signer, err := evidence.NewSigner(key.Key)
	if err != nil {
		return nil, Text{}, fmt.Errorf("config: evidence.signing_key: %w", err)
	}
	where := []any{"key_file", src.File}
	if src.Env != "" {
		where = []any{"key_env", src.Env}
	}
	if created {
		log.Info("created a new evidence signing key: back it up, and give auditors its public key (toolgate evidence pubkey)", where...)
	}
	// The public key is public: it goes out as it is, in the standard
	// base64 of its 32 bytes, which --pubkey accepts as a key file's text.
	log.Info("manifests are signed", append(where, "key_id", signer.KeyID(),
		"public_key", base64.StdEncoding.EncodeToString(signer.PublicKey()))...)
	return signer, key, nil
}

// readSigningKey reads and parses the key src names. A key the gateway owns
// (create: true) is read through readOwnedKeyFile.
func readSigningKey(src *config.SigningKeySource, getenv func(string) string) (Text, error) {
	var text Text
	var err error
	if src.Create {
		text.File, err = readOwnedKeyFile(src.File)
	} else {
		text.File, err = src.Read(getenv)
	}
	if err != nil {
		return Text{}, fmt.Errorf("config: evidence.signing_key: %w", err)
	}
	if text.Key, err = evidence.ParsePrivateKey(text.File); err != nil {
		return Text{}, fmt.Errorf("config: evidence.signing_key: %s: %w", src.Name(), err)
	}
	return text, nil
}

// readOwnedKeyFile reads a key file the gateway owns (create: true). It
// never follows a symbolic link at path, never blocks on a named pipe, and
// refuses anything but a regular file of the gateway's user that group and
// others can neither read nor write: whoever could read the key could sign
// evidence in the gateway's name, and whoever could plant it would know it.
func readOwnedKeyFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	switch {
	case errors.Is(err, syscall.ELOOP):
		return nil, fmt.Errorf("%s is a symbolic link: the gateway never follows one to the key it owns; "+
			"remove the link, or name the key's real path in evidence.signing_key.file", path)
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("%s: %w; %w", path, fs.ErrNotExist, ErrNoKeyYet)
	case err != nil:
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is %s, not a key file", path, regularfile.Kind(fi.Mode()))
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, fmt.Errorf("%s has mode %04o: group or others may read or change the key, and with it sign evidence "+
			"in the gateway's name; chmod 600 it if nobody else can have read it, else replace it", path, perm)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("%s belongs to uid %d, not to the gateway's user (uid %d): whoever put it there knows the key", path, st.Uid, os.Geteuid())
	}
	data, err := io.ReadAll(io.LimitReader(f, config.MaxKeyFileBytes+1))
	if err != nil {
		return nil, err
	}
	if len(data) > config.MaxKeyFileBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes, too large to be a key file", path, config.MaxKeyFileBytes)
	}
	return data, nil
}

// createKeyFile creates path holding a new Ed25519 key (PEM PKCS #8, mode
// 0600) when nothing exists there, and reports whether it did. Whatever
// exists already, a key or something readOwnedKeyFile then refuses, is left
// alone.
//
// The key is written to a temporary file beside path, synced, and linked
// into place: link(2) creates path exclusively and never follows a link
// planted there, and a reader sees either no file or the whole key. Of two
// gateways starting at once in one folder, one links its key and the other
// finds the link taken and reads that key.
func createKeyFile(path string) (bool, error) {
	if _, err := os.Lstat(path); !errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return false, err
	}
	data, err := evidence.EncodePrivateKey(key)
	if err != nil {
		return false, err
	}
	var suffix [8]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return false, err
	}
	dir := filepath.Dir(path)
	tmp := filepath.Join(dir, "."+filepath.Base(path)+".tmp-"+hex.EncodeToString(suffix[:]))
	if err := CreatePrivateFile(tmp, data); err != nil {
		return false, err
	}
	err = os.Link(tmp, path)
	if rmErr := os.Remove(tmp); err == nil {
		err = rmErr
	}
	if errors.Is(err, fs.ErrExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return true, syncDir(dir)
}

// CreatePrivateFile writes data to name, which must not exist yet (not
// even as a symbolic link), with mode 0600 whatever the umask, and syncs
// it; the file is removed again if any step fails. Keys are written so.
func CreatePrivateFile(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	// The umask may have taken bits away; it never adds any, but an
	// exact mode is what the next start checks.
	err = f.Chmod(0o600)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if closeErr := f.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return errors.Join(err, os.Remove(name))
	}
	return nil
}

// syncDir makes a new name in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	return errors.Join(err, d.Close())
}
