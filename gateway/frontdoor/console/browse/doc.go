// Package browse is the read-only part of the console: the pages an
// auditor reads the evidence of a bucket with (requests, one request with
// its verification, a run, a whole-bucket verification) and the index they
// are served from. It imports only evidence and policy, so that
// `toolgate evidence console` serves a bucket without a gateway; package
// console adds sign-in by API key, Cedar's Action::"ReadEvidence" and the
// approvals inbox through the small interfaces declared here (Access,
// Approvals).
//
// Everything a page shows comes from the store, which is hostile: pages
// are html/template renderings (every byte of evidence is text, never
// markup), the only script is one static file, and every response carries
// a Content-Security-Policy without inline script or style and refuses
// framing.
package browse
