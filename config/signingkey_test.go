package config

import (
	"strings"
	"testing"
)

func TestSigningKeyConfig(t *testing.T) {
	const seed = "ERS3l6UZojNnSwiN+GBHKOEipvPm7Q8fJFgyF5PM/YM="
	tests := []struct {
		name    string
		yaml    string
		want    SigningKeySource
		wantErr string // also never the value written
	}{
		{"left out: the embedded default's key, created on first start", "listen: 127.0.0.1:1",
			SigningKeySource{SecretSource: SecretSource{File: "./toolgate-signing.key"}, Create: true}, ""},
		{"left empty: the default too", "evidence: {signing_key: }",
			SigningKeySource{SecretSource: SecretSource{File: "./toolgate-signing.key"}, Create: true}, ""},
		{"none: unsigned", "evidence: {signing_key: none}", SigningKeySource{None: true}, ""},
		{"a key file", "evidence: {signing_key: {file: /etc/tg/k.pem}}", SigningKeySource{SecretSource: SecretSource{File: "/etc/tg/k.pem"}}, ""},
		{"a key in the environment", "evidence: {signing_key: {env: TG_KEY}}", SigningKeySource{SecretSource: SecretSource{Env: "TG_KEY"}}, ""},
		{"a key file the gateway creates", "evidence: {signing_key: {file: k.pem, create: true}}",
			SigningKeySource{SecretSource: SecretSource{File: "k.pem"}, Create: true}, ""},
		{"another word than none", "evidence: {signing_key: off}", SigningKeySource{}, "evidence.signing_key: want none"},
		{"None spelt in capitals", "evidence: {signing_key: NONE}", SigningKeySource{}, "evidence.signing_key: want none"},
		{"the key pasted into the configuration is refused unquoted", "evidence: {signing_key: " + seed + "}", SigningKeySource{}, "a key never goes in the configuration itself"},
		{"a list", "evidence: {signing_key: [a]}", SigningKeySource{}, "evidence.signing_key: want none"},
		{"a misspelt key", "evidence: {signing_key: {fil: k.pem}}", SigningKeySource{}, `evidence.signing_key: unknown key "fil"`},
		{"file and env", "evidence: {signing_key: {file: k.pem, env: K}}", SigningKeySource{}, "evidence.signing_key: give file or env, not both"},
		{"neither file nor env", "evidence: {signing_key: {create: true}}", SigningKeySource{}, "evidence.signing_key: give file or env"},
		{"an environment variable created", "evidence: {signing_key: {env: K, create: true}}", SigningKeySource{}, "evidence.signing_key.create: needs file"},
		{"a bad variable name", "evidence: {signing_key: {env: 'A B'}}", SigningKeySource{}, "evidence.signing_key.env"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := ParseConfig([]byte(tc.yaml))
			if err == nil {
				if cfg, err = cfg.WithDefaults(); err == nil {
					err = cfg.Validate()
				}
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want one mentioning %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), seed) {
					t.Fatalf("the error quotes the key: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := cfg.Evidence.SigningKey; got == nil || *got != tc.want {
				t.Fatalf("signing_key = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestEmbeddedDefaultSigns(t *testing.T) {
	cfg, err := DefaultConfig()
	if err != nil {
		t.Fatal(err)
	}
	want := SigningKeySource{SecretSource: SecretSource{File: "./toolgate-signing.key"}, Create: true}
	if got := cfg.Evidence.SigningKey; got == nil || *got != want {
		t.Fatalf("embedded default signing_key = %+v, want %+v", got, want)
	}
}
