package image

import (
	"crypto/sha256"
	"debug/buildinfo"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"runtime/debug"
	"strings"
	"time"
)

// SPDX 2.3 JSON, the parts the SBOM uses.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreation       `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreation struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
	Comment  string   `json:"comment,omitempty"`
}

type spdxPackage struct {
	Name             string       `json:"name"`
	SPDXID           string       `json:"SPDXID"`
	VersionInfo      string       `json:"versionInfo"`
	DownloadLocation string       `json:"downloadLocation"`
	FilesAnalyzed    bool         `json:"filesAnalyzed"`
	PrimaryPurpose   string       `json:"primaryPackagePurpose,omitempty"`
	Checksums        []spdxSum    `json:"checksums,omitempty"`
	ExternalRefs     []spdxExtRef `json:"externalRefs,omitempty"`
	Comment          string       `json:"comment,omitempty"`
}

type spdxSum struct {
	Algorithm string `json:"algorithm"`
	Value     string `json:"checksumValue"`
}

type spdxExtRef struct {
	Category string `json:"referenceCategory"`
	Type     string `json:"referenceType"`
	Locator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	Element string `json:"spdxElementId"`
	Type    string `json:"relationshipType"`
	Related string `json:"relatedSpdxElement"`
}

// SBOM is an SPDX 2.3 JSON document of the binary: the binary itself (by
// its SHA-256), the main module, the Go toolchain and every module the
// build information lists, each with its package URL and, for modules,
// the go.sum hash in a comment. It is what `go version -m` prints, as SPDX.
func SBOM(info *buildinfo.BuildInfo, binary []byte, o Options) ([]byte, error) {
	sum := sha256.Sum256(binary)
	digest := hex.EncodeToString(sum[:])
	doc := spdxDocument{
		SPDXVersion: "SPDX-2.3", DataLicense: "CC0-1.0", SPDXID: "SPDXRef-DOCUMENT",
		Name:              "toolgate-" + o.Version,
		DocumentNamespace: fmt.Sprintf("%s/spdx/toolgate-%s-%s", sourceLabel, o.Version, digest),
		CreationInfo: spdxCreation{
			Created:  o.Created.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: toolgate-deploy-imagebuild"},
			Comment:  "From the Go build information of " + BinaryPath + " (go version -m).",
		},
	}
	bin := spdxPackage{Name: "toolgate", SPDXID: "SPDXRef-Binary", VersionInfo: o.Version, DownloadLocation: "NOASSERTION",
		PrimaryPurpose: "APPLICATION", Checksums: []spdxSum{{"SHA256", digest}},
		Comment: "the file " + BinaryPath + "; build settings: " + settings(info)}
	doc.Packages = append(doc.Packages, bin,
		module("SPDXRef-Main", &debug.Module{Path: info.Main.Path, Version: o.Version}, "APPLICATION"),
		spdxPackage{Name: "go", SPDXID: "SPDXRef-Go", VersionInfo: strings.TrimPrefix(info.GoVersion, "go"), DownloadLocation: "https://go.dev/dl/",
			ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl", "pkg:golang/stdlib@" + info.GoVersion}}})
	doc.Relationships = append(doc.Relationships,
		spdxRelationship{"SPDXRef-DOCUMENT", "DESCRIBES", "SPDXRef-Binary"},
		spdxRelationship{"SPDXRef-Binary", "GENERATED_FROM", "SPDXRef-Main"},
		spdxRelationship{"SPDXRef-Binary", "DEPENDS_ON", "SPDXRef-Go"})
	for i, dep := range info.Deps {
		id := fmt.Sprintf("SPDXRef-Module-%d", i)
		if dep.Replace != nil {
			dep = dep.Replace
		}
		doc.Packages = append(doc.Packages, module(id, dep, "LIBRARY"))
		doc.Relationships = append(doc.Relationships, spdxRelationship{"SPDXRef-Binary", "DEPENDS_ON", id})
	}
	return json.MarshalIndent(doc, "", "  ")
}

func module(id string, m *debug.Module, purpose string) spdxPackage {
	p := spdxPackage{Name: m.Path, SPDXID: id, VersionInfo: m.Version, DownloadLocation: "NOASSERTION", PrimaryPurpose: purpose,
		ExternalRefs: []spdxExtRef{{"PACKAGE-MANAGER", "purl", fmt.Sprintf("pkg:golang/%s@%s", m.Path, m.Version)}}}
	if m.Sum != "" {
		p.Comment = "go.sum " + m.Sum
	}
	return p
}

// settings lists the build settings that say how the binary was built.
func settings(info *buildinfo.BuildInfo) string {
	var s []string
	for _, kv := range info.Settings {
		s = append(s, kv.Key+"="+kv.Value)
	}
	return strings.Join(s, " ")
}
