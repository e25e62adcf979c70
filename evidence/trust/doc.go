// Package trust authenticates the records a gateway reads back from its
// evidence store.
//
// The store is untrusted storage: anyone who can write to the bucket or
// the evidence folder can add, replace or delete any object. Only a holder
// of the gateway's keys may make the gateway act, so every record the
// gateway acts on when it reads it back carries a seal made with a key
// that is not in the store, and is opened (its seal checked) before use.
//
// A seal is appended to a record's JSON object as its last member,
//
//	{...,"seal":{"alg":"ed25519","key_id":"ed25519:…","value":"<base64>"}}
//
// and covers the exact bytes of the object without it, together with the
// store key the record lives under: a sealed record cannot be changed, nor
// moved to another request or another artifact. Two algorithms exist:
//
//   - ed25519: a signature by a gateway's signing key, checked with the
//     public keys a Keyring trusts. Any replica that trusts the key, and any
//     auditor holding it, can check it offline. Records that let a gateway
//     run something (approvals, an attempt closed as not dispatched) or
//     that another replica must believe are signed.
//   - hmac-sha256: a MAC under a key derived from the signing key. It costs
//     a twentieth of a signature, so the records every call writes (the
//     claim, the decision, the dispatch marker) carry it; only the gateway
//     that wrote them (or one configured with the same key) checks it.
//
// A record whose seal is missing, malformed, made by an untrusted key or
// not matching its content is tampering: Open returns an error wrapping
// ErrTampered, and the caller acts on nothing in it.
package trust
