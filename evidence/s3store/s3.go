// Package s3store is the S3 backend of the evidence store: AWS S3,
// Cloudflare R2, MinIO and other services with conditional writes.
//
// It is a package of its own so that the AWS SDK is linked only by a
// program that opens an S3 store: it depends on evidence/storage alone,
// and evidence (the record formats, the log and the verifier) does not
// import it. evidence/storeurl opens it from an "s3://" URL.
package s3store

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"maps"
	mathrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/toolgate/toolgate/evidence/storage"
)

// Defaults for the Options fields left at zero.
const (
	DefaultMaxAttempts    = 5
	DefaultRetryBaseDelay = 100 * time.Millisecond
	DefaultRetryMaxDelay  = 2 * time.Second
	DefaultAttemptTimeout = 30 * time.Second
)

// maxObjectLockDays bounds object_lock_days: a century is longer than any
// retention rule asks for, and a typo of a few extra digits in COMPLIANCE
// mode would lock objects that no one, not even the account's root user,
// can delete before the date passes.
const maxObjectLockDays = 36500

// putIDMetadata names the user metadata entry holding the random id of
// the Put call that created an object. A retried Put that finds the key
// taken compares it with its own id to tell its earlier, unacknowledged
// attempt from another writer's object.
const putIDMetadata = "put-id"

// Options configures a Store. Only Bucket is required.
type Options struct {
	// Bucket is the bucket that holds the artifacts.
	Bucket string
	// Prefix, if set, is prepended to every key with a slash between:
	// key "requests/r1/request.json" is stored as object
	// "Prefix/requests/r1/request.json". It must be a valid key itself.
	Prefix string
	// Endpoint is the base URL of an S3-compatible service, such as
	// "https://ACCOUNT_ID.r2.cloudflarestorage.com" for Cloudflare R2. Empty
	// means AWS S3.
	Endpoint string
	// Region is the signing region: "auto" for R2, the bucket's region for
	// AWS. Empty means the region of the standard AWS configuration
	// (AWS_REGION or the shared config file).
	Region string
	// PathStyle addresses the bucket as ENDPOINT/BUCKET rather than
	// BUCKET.ENDPOINT, as MinIO and most self-hosted services need.
	PathStyle bool
	// ObjectLockMode, if set, is "GOVERNANCE" or "COMPLIANCE": every object
	// is stored with that retention mode for ObjectLockDays days, during
	// which it cannot be deleted or overwritten. The bucket must have been
	// created with object lock enabled. On Cloudflare R2, retention comes
	// from the bucket's lock rules instead; leave this empty there.
	ObjectLockMode string
	// ObjectLockDays is the retention period, 1 to 36500 days. It must be
	// set with ObjectLockMode and only with it.
	ObjectLockDays int
	// CompressThreshold is the size in bytes above which artifacts are
	// stored gzip-compressed (with Content-Encoding: gzip). 0 means
	// storage.DefaultCompressThreshold; a negative value turns compression
	// off.
	CompressThreshold int
	// MaxAttempts bounds the requests made for one call, retries
	// included. 0 means DefaultMaxAttempts.
	MaxAttempts int
	// RetryBaseDelay and RetryMaxDelay shape the wait before a retry: a
	// random duration up to RetryBaseDelay·2^(n-1), capped at
	// RetryMaxDelay, before retry n. 0 means the DefaultRetry* value.
	RetryBaseDelay, RetryMaxDelay time.Duration
	// AttemptTimeout bounds each request, so that a connection that stops
	// answering is retried instead of holding the call until its context
	// ends. 0 means DefaultAttemptTimeout.
	AttemptTimeout time.Duration
}

// bucketName is the rule for bucket names that AWS S3, R2 and MinIO all
// accept.
var bucketName = regexp.MustCompile(`^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$`)

// regionName matches signing regions such as "us-east-1" and "auto".
var regionName = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,62}$`)

// check reports the first option that breaks its rule.
func (o *Options) check() error {
	if !bucketName.MatchString(o.Bucket) {
		return fmt.Errorf("bucket %q is not a valid bucket name (3 to 63 lowercase letters, digits, dots and hyphens)", o.Bucket)
	}
	if o.Prefix != "" {
		if err := storage.ValidKey(o.Prefix); err != nil {
			return fmt.Errorf("prefix: %w", err)
		}
	}
	if o.Region != "" && !regionName.MatchString(o.Region) {
		return fmt.Errorf("region %q is not a region name (lowercase letters, digits and hyphens)", o.Region)
	}
	if o.Endpoint != "" {
		if err := checkEndpoint(o.Endpoint); err != nil {
			return err
		}
	}
	switch types.ObjectLockMode(o.ObjectLockMode) {
	case "":
		if o.ObjectLockDays != 0 {
			return errors.New("object lock days are set without an object lock mode")
		}
	case types.ObjectLockModeGovernance, types.ObjectLockModeCompliance:
		if o.ObjectLockDays < 1 || o.ObjectLockDays > maxObjectLockDays {
			return fmt.Errorf("object lock days %d is not between 1 and %d", o.ObjectLockDays, maxObjectLockDays)
		}
	default:
		return fmt.Errorf("object lock mode %q is not GOVERNANCE or COMPLIANCE", o.ObjectLockMode)
	}
	switch {
	case o.MaxAttempts < 0:
		return fmt.Errorf("max attempts %d is negative", o.MaxAttempts)
	case o.RetryBaseDelay < 0 || o.RetryMaxDelay < 0:
		return errors.New("retry delays must not be negative")
	case o.AttemptTimeout < 0:
		return fmt.Errorf("attempt timeout %v is negative", o.AttemptTimeout)
	}
	return nil
}

// checkEndpoint accepts an absolute http or https URL with a host and
// nothing that would be lost or leaked when the client builds requests.
func checkEndpoint(endpoint string) error {
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return fmt.Errorf("endpoint is not a URL: %w", errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("endpoint %q is not an http or https URL", u.Redacted())
	case u.Host == "":
		return fmt.Errorf("endpoint %q has no host", u.Redacted())
	case u.User != nil:
		return errors.New("endpoint must not carry credentials; they come from the standard AWS environment")
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("endpoint %q must not have a query or fragment", u.Redacted())
	}
	return nil
}

// ParseURL reads the options of an "s3://" store URL:
//
//	s3://BUCKET[/PREFIX][?PARAM=VALUE&...]
//
// with the parameters endpoint, region, path_style, object_lock_mode,
// object_lock_days and compress_threshold, each at most once. Leading and
// trailing slashes around PREFIX are dropped. An unknown parameter is an
// error, so that a misspelt one cannot silently turn a protection off.
func ParseURL(rawURL string) (Options, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		// The url.Error would quote the whole URL; the cause is enough.
		return Options{}, fmt.Errorf("evidence: s3 store URL: %w", errors.Unwrap(err))
	}
	if u.User != nil {
		return Options{}, errors.New("evidence: s3 store URL must not carry credentials; they come from the standard AWS environment")
	}
	if u.Fragment != "" || u.Opaque != "" {
		return Options{}, fmt.Errorf("evidence: s3 store URL %q is not of the form s3://BUCKET/PREFIX?PARAMS", u.Redacted())
	}
	params, err := url.ParseQuery(u.RawQuery)
	if err != nil {
		return Options{}, fmt.Errorf("evidence: s3 store URL query: %w", err)
	}
	o := Options{Bucket: u.Host, Prefix: strings.Trim(u.Path, "/")}
	// In name order, so that a URL with several mistakes always reports
	// the same one.
	for _, name := range slices.Sorted(maps.Keys(params)) {
		values := params[name]
		if len(values) != 1 {
			return Options{}, fmt.Errorf("evidence: s3 store URL: parameter %q is given %d times", name, len(values))
		}
		if err := o.setParam(name, values[0]); err != nil {
			return Options{}, fmt.Errorf("evidence: s3 store URL: %w", err)
		}
	}
	if err := o.check(); err != nil {
		return Options{}, fmt.Errorf("evidence: s3 store URL: %w", err)
	}
	return o, nil
}

// setParam sets the option that the URL parameter name stands for.
func (o *Options) setParam(name, value string) error {
	if value == "" {
		return fmt.Errorf("parameter %q is empty", name)
	}
	atoi := func() (int, error) {
		n, err := strconv.Atoi(value)
		if err != nil {
			return 0, fmt.Errorf("parameter %q: %q is not an integer", name, value)
		}
		return n, nil
	}
	var err error
	switch name {
	case "endpoint":
		o.Endpoint = value
	case "region":
		o.Region = value
	case "path_style":
		if o.PathStyle, err = strconv.ParseBool(value); err != nil {
			return fmt.Errorf("parameter %q: %q is not true or false", name, value)
		}
	case "object_lock_mode":
		o.ObjectLockMode = strings.ToUpper(value)
	case "object_lock_days":
		o.ObjectLockDays, err = atoi()
	case "compress_threshold":
		o.CompressThreshold, err = atoi()
	default:
		return fmt.Errorf("unknown parameter %q (known: endpoint, region, path_style, object_lock_mode, object_lock_days, compress_threshold)", name)
	}
	return err
}

// Store is an evidence store (a storage.StoreCloser) kept in an
// S3-compatible bucket: AWS S3, Cloudflare
// R2, MinIO and others that support conditional writes.
//
// Put is create-only through a conditional write (If-None-Match: *), so
// concurrent writers of one key, on any number of hosts, get exactly one
// winner. Each object carries a SHA-256 checksum that the service verifies
// before storing it, and, if configured, an object lock retention.
// Transient failures are retried with capped, jittered exponential
// backoff. Credentials come from the standard AWS chain: environment
// variables, shared configuration files, or the instance's role. They need
// s3:PutObject, s3:GetObject and s3:ListBucket on the bucket (without
// s3:ListBucket, S3 answers a read of a missing key with "access denied"
// rather than "no such key"), plus s3:PutObjectRetention for object lock.
type Store struct {
	client    *s3.Client
	transport *http.Transport // nil if the configuration supplied its own client
	bucket    string
	prefix    string // "" or ending in "/"
	lockMode  types.ObjectLockMode
	lockDays  int
	threshold int
	attempts  int
	baseDelay time.Duration
	maxDelay  time.Duration
	timeout   time.Duration
	// slots bounds the requests in flight (MaxInFlight): one per
	// attempt, held only while it runs, so a caller waits for a slot at
	// most until its context ends, and a stuck request holds one slot for
	// at most the attempt timeout.
	slots chan struct{}
}

// MaxInFlight is how many requests a Store has in flight at once;
// more wait for a slot. It is above the gateway's default 64 concurrent
// calls, so that one call's requests never wait on another's under the
// defaults, and bounds the connections a replica opens to the service.
const MaxInFlight = 128

var (
	_ storage.StoreCloser   = (*Store)(nil)
	_ storage.InfoWalker    = (*Store)(nil)
	_ storage.SegmentLister = (*Store)(nil)
)

// New returns a store kept in the bucket that opts names. It makes no
// request: a wrong bucket or missing permission shows on first use.
// clientOpts, applied last, adjust the SDK client: static credentials,
// or middleware through which tests interpose on requests.
func New(ctx context.Context, opts Options, clientOpts ...func(*s3.Options)) (*Store, error) {
	if err := opts.check(); err != nil {
		return nil, fmt.Errorf("evidence: s3 store: %w", err)
	}
	var loadOpts []func(*config.LoadOptions) error
	if opts.Region != "" {
		loadOpts = append(loadOpts, config.WithRegion(opts.Region))
	}
	cfg, err := config.LoadDefaultConfig(ctx, loadOpts...)
	if err != nil {
		return nil, fmt.Errorf("evidence: s3 store: load AWS configuration: %w", err)
	}
	if cfg.Region == "" {
		return nil, errors.New(`evidence: s3 store: no region: set region= in the store URL ("auto" for R2) or AWS_REGION`)
	}
	// The configured client (with AWS_CA_BUNDLE applied, for one) is
	// rebuilt around a transport of our own, so that Close can release
	// its connections. Redirects are not followed: S3 answers a wrong
	// region with one, and that is a configuration error to report.
	var transport *http.Transport
	if bc, ok := cfg.HTTPClient.(*awshttp.BuildableClient); ok {
		transport = bc.GetTransport()
		// Every request in flight keeps its connection when it ends: with
		// the SDK's 10 idle connections per host, a gateway under more
		// concurrent calls than that opened (and closed) a connection for
		// most requests.
		transport.MaxIdleConnsPerHost = MaxInFlight
		transport.MaxIdleConns = max(transport.MaxIdleConns, MaxInFlight)
		cfg.HTTPClient = &http.Client{
			Transport:     transport,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	client := s3.NewFromConfig(cfg, append([]func(*s3.Options){func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		o.UsePathStyle = opts.PathStyle
		// Objects written by other tools may carry no checksum; reading
		// them is normal and not worth a log line per Get.
		o.DisableLogOutputChecksumValidationSkipped = true
		// Retries are this store's own, so that their number and total
		// time are bounded by the options and a retried Put can tell its
		// own earlier write from someone else's.
		o.Retryer = aws.NopRetryer{}
		o.RetryMaxAttempts = 1
	}}, clientOpts...)...)
	s := &Store{
		client:    client,
		transport: transport,
		bucket:    opts.Bucket,
		lockMode:  types.ObjectLockMode(opts.ObjectLockMode),
		lockDays:  opts.ObjectLockDays,
		threshold: opts.CompressThreshold,
		attempts:  cmp.Or(opts.MaxAttempts, DefaultMaxAttempts),
		baseDelay: cmp.Or(opts.RetryBaseDelay, DefaultRetryBaseDelay),
		maxDelay:  cmp.Or(opts.RetryMaxDelay, DefaultRetryMaxDelay),
		timeout:   cmp.Or(opts.AttemptTimeout, DefaultAttemptTimeout),
		slots:     make(chan struct{}, MaxInFlight),
	}
	if opts.Prefix != "" {
		s.prefix = opts.Prefix + "/"
	}
	return s, nil
}

// Close releases the store's idle connections. The store must not be used
// after.
func (s *Store) Close() error {
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
	return nil
}

// Put stores data under key if key is not yet stored. When it returns nil
// the service has acknowledged the write, after checking the body against
// its SHA-256 checksum. Data longer than the compression threshold is
// stored gzip-compressed, with Content-Encoding: gzip; Get undoes that.
//
// If an attempt's outcome is unknown (the connection dropped after the
// request was sent, say) and the retry finds the key taken, Put succeeds
// only if the stored object is the one that attempt wrote.
func (s *Store) Put(ctx context.Context, key string, data []byte) error {
	if err := storage.CheckPut(ctx, key, data); err != nil {
		return err
	}
	body := storage.EncodeBody(data, s.threshold)
	sum := sha256.Sum256(body)
	checksum := base64.StdEncoding.EncodeToString(sum[:])
	putID := rand.Text()
	var encoding *string
	if storage.IsGzip(body) { // stored data never starts with the magic unless compressed
		encoding = aws.String("gzip")
	}
	var retainUntil *time.Time
	if s.lockMode != "" {
		retainUntil = aws.Time(time.Now().AddDate(0, 0, s.lockDays))
	}
	object := s.prefix + key
	unknown := false // whether an earlier attempt may have stored the object
	err := s.retry(ctx, func(ctx context.Context) error {
		_, err := s.client.PutObject(ctx, &s3.PutObjectInput{
			Bucket:                    &s.bucket,
			Key:                       &object,
			Body:                      bytes.NewReader(body),
			ContentLength:             aws.Int64(int64(len(body))),
			ContentType:               aws.String("application/json"),
			ContentEncoding:           encoding,
			ChecksumSHA256:            &checksum,
			IfNoneMatch:               aws.String("*"),
			Metadata:                  map[string]string{putIDMetadata: putID},
			ObjectLockMode:            s.lockMode,
			ObjectLockRetainUntilDate: retainUntil,
		})
		if unknown && httpStatus(err) == http.StatusPreconditionFailed {
			mine, headErr := s.storedBy(ctx, object, putID)
			if headErr != nil {
				return headErr
			}
			if mine {
				return nil
			}
		}
		if err != nil && !notSent(err) {
			unknown = true
		}
		return err
	})
	switch {
	case err == nil:
		return nil
	case httpStatus(err) == http.StatusPreconditionFailed:
		return fmt.Errorf("%w: %q", storage.ErrExist, key)
	default:
		return fmt.Errorf("evidence: put %q: %w", key, err)
	}
}

// storedBy reports whether object was created by the Put call with the
// given id.
func (s *Store) storedBy(ctx context.Context, object, putID string) (bool, error) {
	out, err := s.client.HeadObject(ctx, &s3.HeadObjectInput{Bucket: &s.bucket, Key: &object})
	if err != nil {
		return false, err
	}
	return out.Metadata[putIDMetadata] == putID, nil
}

// Get returns the data stored under key, decompressed if it was stored
// compressed.
func (s *Store) Get(ctx context.Context, key string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("evidence: get %q: %w", key, err)
	}
	if err := storage.ValidKey(key); err != nil {
		return nil, err
	}
	object := s.prefix + key
	var body []byte
	err := s.retry(ctx, func(ctx context.Context) error {
		out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: &s.bucket, Key: &object})
		if err != nil {
			return err
		}
		defer out.Body.Close()
		// Reading through the body also checks the service's checksum.
		body, err = io.ReadAll(io.LimitReader(out.Body, storage.MaxArtifactSize+1))
		if err != nil {
			return err
		}
		if len(body) > storage.MaxArtifactSize {
			return storage.ErrTooLarge
		}
		return nil
	})
	switch {
	case isNoSuchKey(err):
		return nil, fmt.Errorf("%w: %q", storage.ErrNotExist, key)
	case err != nil:
		return nil, fmt.Errorf("evidence: get %q: %w", key, err)
	}
	data, err := storage.DecodeBody(body)
	if err != nil {
		return nil, fmt.Errorf("evidence: get %q: %w", key, err)
	}
	return data, nil
}

// List returns the keys that start with prefix, sorted.
func (s *Store) List(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	err := s.Walk(ctx, prefix, func(key string) error {
		keys = append(keys, key)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return keys, nil
}

// Walk calls fn with each key that starts with prefix, in ascending byte
// order, one listing page (up to 1,000 keys) at a time. Objects whose
// names are not valid keys were not written by Put and are skipped. A
// service that lists out of order is reported as an error rather than
// trusted.
func (s *Store) Walk(ctx context.Context, prefix string, fn func(key string) error) error {
	return s.WalkInfo(ctx, prefix, func(ki storage.KeyInfo) error { return fn(ki.Key) })
}

// WalkInfo is Walk with each object's size and LastModified time, which
// the listing carries anyway: it costs no request more than Walk. The time
// is the service's record of when it stored the object, by its own clock
// and often only to the second; the size is the stored object's, which for
// a compressed artifact is less than Get returns.
func (s *Store) WalkInfo(ctx context.Context, prefix string, fn func(storage.KeyInfo) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("evidence: walk %q: %w", prefix, err)
	}
	if !canStartKey(prefix) {
		return nil
	}
	// MinIO refuses a prefix whose last segment is "." or "..", even though
	// keys such as "..x" may follow it; such a prefix is listed by its
	// parent and the rest filtered here.
	query := prefix
	if seg := prefix[strings.LastIndexByte(prefix, '/')+1:]; seg == "." || seg == ".." {
		query = prefix[:len(prefix)-len(seg)]
	}
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + query)}
	last := ""
	for {
		page, err := s.listPage(ctx, in)
		if err != nil {
			return fmt.Errorf("evidence: walk %q: %w", prefix, err)
		}
		for _, obj := range page.Contents {
			key, ok := strings.CutPrefix(aws.ToString(obj.Key), s.prefix)
			if !ok || !strings.HasPrefix(key, prefix) || storage.ValidKey(key) != nil {
				continue
			}
			if last != "" && key <= last {
				return fmt.Errorf("evidence: walk %q: the service listed %q after %q, out of order", prefix, key, last)
			}
			last = key
			ki := storage.KeyInfo{Key: key, Size: aws.ToInt64(obj.Size), ModTime: aws.ToTime(obj.LastModified)}
			if err := fn(ki); err != nil {
				return err
			}
		}
		if !aws.ToBool(page.IsTruncated) || aws.ToString(page.NextContinuationToken) == "" {
			return nil
		}
		in.ContinuationToken = page.NextContinuationToken
	}
}

// canStartKey reports whether some valid key may start with prefix. It
// errs only towards true: Walk filters what the service lists anyway, and
// the check is there to spare the service prefixes it may reject, such as
// "../".
func canStartKey(prefix string) bool {
	// The prefix may end partway through a multi-byte character.
	for i := 1; i < utf8.UTFMax && !utf8.ValidString(prefix); i++ {
		prefix = prefix[:len(prefix)-1]
	}
	// A valid key either is the prefix or continues it; appending any
	// ordinary character stands for the continuation.
	return prefix == "" || storage.ValidKey(prefix) == nil || storage.ValidKey(prefix+"x") == nil
}

// retry calls attempt until it succeeds, fails permanently, has been
// called s.attempts times, or ctx ends. Each call gets s.timeout. It
// returns attempt's last error, joined with ctx's if ctx ended.
// listPage fetches one page of a listing, retried as every call is.
func (s *Store) listPage(ctx context.Context, in *s3.ListObjectsV2Input) (*s3.ListObjectsV2Output, error) {
	var page *s3.ListObjectsV2Output
	err := s.retry(ctx, func(ctx context.Context) error {
		var err error
		page, err = s.client.ListObjectsV2(ctx, in)
		return err
	})
	return page, err
}

func (s *Store) retry(ctx context.Context, attempt func(ctx context.Context) error) error {
	for n := 1; ; n++ {
		select {
		case s.slots <- struct{}{}:
		case <-ctx.Done():
			return fmt.Errorf("waiting for one of the %d request slots: %w", MaxInFlight, ctx.Err())
		}
		actx, cancel := context.WithTimeout(ctx, s.timeout)
		err := attempt(actx)
		cancel()
		<-s.slots
		switch {
		case err == nil:
			return nil
		case ctx.Err() != nil:
			return ctxError(ctx, err)
		case !transient(err):
			return err
		case n >= s.attempts:
			return fmt.Errorf("gave up after %d attempts: %w", n, err)
		}
		timer := time.NewTimer(s.backoff(n))
		select {
		case <-ctx.Done():
			timer.Stop()
			return ctxError(ctx, err)
		case <-timer.C:
		}
	}
}

// ctxError is err, made to wrap ctx's error if it does not already.
func ctxError(ctx context.Context, err error) error {
	if errors.Is(err, ctx.Err()) {
		return err
	}
	return fmt.Errorf("%w (last attempt: %w)", ctx.Err(), err)
}

// backoff returns the wait before retry n (n ≥ 1): "full jitter", a
// uniformly random duration up to the capped exponential bound, which
// spreads out writers that failed together.
func (s *Store) backoff(n int) time.Duration {
	bound := s.maxDelay
	if n-1 < 62 && s.baseDelay <= s.maxDelay>>(n-1) {
		bound = s.baseDelay << (n - 1)
	}
	if bound <= 0 {
		return 0
	}
	return mathrand.N(bound + 1)
}

// httpStatus returns the HTTP status of the response err reports, or 0.
func httpStatus(err error) int {
	var re interface{ HTTPStatusCode() int }
	if errors.As(err, &re) {
		return re.HTTPStatusCode()
	}
	return 0
}

// isNoSuchKey reports whether err says the object is absent. A 404 alone
// is not enough: a missing bucket answers with one too, and must not read
// as a missing artifact.
func isNoSuchKey(err error) bool {
	var apiErr smithy.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode() == "NoSuchKey"
}

// transient reports whether a request that failed with err may succeed if
// repeated: throttling, server errors, conflicting concurrent conditional
// writes, timeouts and dropped connections. The caller has already checked
// that its own context has not ended, so a deadline here is an attempt's.
func transient(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var apiErr smithy.APIError
	if errors.As(err, &apiErr) {
		switch apiErr.ErrorCode() {
		case "SlowDown", "Throttling", "ThrottlingException", "TooManyRequests",
			"RequestTimeout", "InternalError", "ServiceUnavailable",
			"ConditionalRequestConflict", "OperationAborted":
			return true
		}
	}
	switch status := httpStatus(err); {
	case status >= 500, status == http.StatusTooManyRequests, status == http.StatusConflict:
		return true
	case status != 0:
		return false
	}
	var certErr *tls.CertificateVerificationError
	if errors.As(err, &certErr) {
		return false // a misconfiguration; repeating will not fix it
	}
	var sendErr *smithyhttp.RequestSendError
	var netErr net.Error
	return errors.As(err, &sendErr) || errors.As(err, &netErr) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF)
}

// notSent reports whether err shows the request never reached the
// service, because no connection could be made.
func notSent(err error) bool {
	var opErr *net.OpError
	var dnsErr *net.DNSError
	return errors.As(err, &dnsErr) || (errors.As(err, &opErr) && opErr.Op == "dial")
}

// ListSegments lists prefix with the delimiter "/": one request per
// thousand segments, whatever lies below them.
func (s *Store) ListSegments(ctx context.Context, prefix string) ([]string, error) {
	if !canStartKey(prefix) {
		return nil, nil
	}
	in := &s3.ListObjectsV2Input{Bucket: &s.bucket, Prefix: aws.String(s.prefix + prefix), Delimiter: aws.String("/")}
	var out []string
	for {
		page, err := s.listPage(ctx, in)
		if err != nil {
			return nil, fmt.Errorf("evidence: list segments %q: %w", prefix, err)
		}
		for _, p := range page.CommonPrefixes {
			seg, ok := strings.CutPrefix(aws.ToString(p.Prefix), s.prefix+prefix)
			seg, slash := strings.CutSuffix(seg, "/")
			if ok && slash && seg != "" && storage.ValidKey(prefix+seg+"/x") == nil {
				out = append(out, seg)
			}
		}
		if !aws.ToBool(page.IsTruncated) || aws.ToString(page.NextContinuationToken) == "" {
			break
		}
		in.ContinuationToken = page.NextContinuationToken
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}
