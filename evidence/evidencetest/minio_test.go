package evidencetest_test

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/toolgate/toolgate/evidence/evidencetest"
)

func TestMinIORestartKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "evidence", false)
	put := &s3.PutObjectInput{Bucket: aws.String("evidence"), Key: aws.String("k"), Body: strings.NewReader("kept")}
	if _, err := m.Client().PutObject(ctx, put); err != nil {
		t.Fatalf("PutObject = %v", err)
	}

	m.Stop(t)
	if resp, err := http.Get(m.Endpoint + "/minio/health/live"); err == nil {
		resp.Body.Close()
		t.Fatal("the server still answers after Stop")
	}

	m.Start(t)
	out, err := m.Client().GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String("evidence"), Key: aws.String("k")})
	if err != nil {
		t.Fatalf("GetObject after restart = %v", err)
	}
	defer out.Body.Close()
	if data, err := io.ReadAll(out.Body); err != nil || string(data) != "kept" {
		t.Fatalf("object after restart = (%q, %v), want %q", data, err, "kept")
	}
}

func TestMinIOObjectLockBucket(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "locked", true)
	out, err := m.Client().GetObjectLockConfiguration(context.Background(), &s3.GetObjectLockConfigurationInput{Bucket: aws.String("locked")})
	if err != nil {
		t.Fatalf("GetObjectLockConfiguration = %v", err)
	}
	if got := out.ObjectLockConfiguration.ObjectLockEnabled; got != "Enabled" {
		t.Fatalf("object lock = %q, want Enabled", got)
	}
}

func TestMinIOURLAndEnv(t *testing.T) {
	t.Parallel()
	m := &evidencetest.MinIO{Endpoint: "http://127.0.0.1:9000", AccessKey: "ak", SecretKey: "sk"}
	if got, want := m.URL("evidence", "tenant/a"), "s3://evidence/tenant/a?endpoint=http://127.0.0.1:9000&region=us-east-1&path_style=true"; got != want {
		t.Errorf("URL = %q, want %q", got, want)
	}
	env := m.Env()
	for _, kv := range []string{"AWS_ACCESS_KEY_ID=ak", "AWS_SECRET_ACCESS_KEY=sk", "AWS_REGION=us-east-1", "AWS_PROFILE="} {
		if !slices.Contains(env, kv) {
			t.Errorf("Env() = %q, missing %q", env, kv)
		}
	}
}

// TestMinIOFreezeThawKill: a frozen server does not answer until it is
// thawed, and a killed one can be started again with its data.
func TestMinIOFreezeThawKill(t *testing.T) {
	t.Parallel()
	m := evidencetest.StartMinIO(t)
	m.CreateBucket(t, "evidence", false)
	client := &http.Client{Timeout: 500 * time.Millisecond}
	defer client.CloseIdleConnections()
	live := func() error {
		resp, err := client.Get(m.Endpoint + "/minio/health/live")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}

	m.Freeze(t)
	if err := live(); err == nil {
		t.Fatal("a frozen server answered")
	}
	m.Thaw(t)
	if err := live(); err != nil {
		t.Fatalf("the thawed server does not answer: %v", err)
	}

	m.Kill(t)
	if err := live(); err == nil {
		t.Fatal("the server still answers after Kill")
	}
	m.Start(t)
	if _, err := m.Client().HeadBucket(context.Background(), &s3.HeadBucketInput{Bucket: aws.String("evidence")}); err != nil {
		t.Fatalf("the bucket is gone after Kill and Start: %v", err)
	}
}
