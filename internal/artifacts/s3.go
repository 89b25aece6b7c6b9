package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
)

// s3Store is an S3 bucket (AWS, or an S3-compatible server: R2, MinIO, Ceph, versitygw).
// The AWS SDK's default chain gives region and credentials (AWS_REGION,
// AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, ~/.aws, roles) and the endpoint
// (AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL); with an endpoint of its own, a server is
// addressed path-style (http://host/bucket/key), which every S3-compatible one serves.
type s3Store struct {
	bucket, prefix string
	client         *s3.Client
	presign        *s3.PresignClient
	public         string
	spool          string // Options.SpoolDir
}

func openS3(ctx context.Context, bucket, prefix string, opts Options) (*s3Store, error) {
	cfg, err := config.LoadDefaultConfig(ctx)
	if err != nil {
		return nil, fmt.Errorf("artifacts store s3://%s: the AWS configuration: %w", bucket, err)
	}
	if opts.SpoolDir != "" {
		if err := os.RemoveAll(opts.SpoolDir); err != nil {
			return nil, fmt.Errorf("artifacts store s3://%s: empty the spool: %w", bucket, err)
		}
		if err := os.MkdirAll(opts.SpoolDir, 0o700); err != nil {
			return nil, fmt.Errorf("artifacts store s3://%s: the spool: %w", bucket, err)
		}
	}
	custom := os.Getenv("AWS_ENDPOINT_URL_S3") != "" || os.Getenv("AWS_ENDPOINT_URL") != ""
	client := s3.NewFromConfig(cfg, func(o *s3.Options) { o.UsePathStyle = custom })
	return &s3Store{bucket: bucket, prefix: prefix, client: client, presign: s3.NewPresignClient(client), public: opts.PublicURL, spool: opts.SpoolDir}, nil
}

func (s *s3Store) Key(tenant, session, rel string) string { return Key(s.prefix, tenant, session, rel) }

func (s *s3Store) Name(key string) string { return "s3://" + s.bucket + "/" + key }

// Put spools body to a temporary file first: the SDK signs a payload it can read twice,
// and a file keeps the server's memory flat whatever the size.
func (s *s3Store) Put(ctx context.Context, key string, body io.Reader, size int64, contentType string) error {
	f, err := os.CreateTemp(s.spool, "cellbox-artifact-*")
	if err != nil {
		return fmt.Errorf("spool %s: %w", s.Name(key), err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	n, err := io.Copy(f, body)
	if err != nil {
		return fmt.Errorf("read the file for %s: %w", s.Name(key), err)
	}
	if n != size {
		return fmt.Errorf("the file for %s was %d bytes, not %d: it changed while it was read", s.Name(key), n, size)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	_, err = s.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key), Body: f,
		ContentLength: aws.Int64(n), ContentType: aws.String(contentType)})
	if err != nil {
		return fmt.Errorf("upload to %s: %s", s.Name(key), s3Message(err))
	}
	return nil
}

func (s *s3Store) URL(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error) {
	if s.public != "" {
		return publicURL(s.public, key), time.Time{}, nil
	}
	ttl = min(ttl, MaxTTL)
	req, err := s.presign.PresignGetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.bucket), Key: aws.String(key)}, s3.WithPresignExpires(ttl))
	if err != nil {
		return "", time.Time{}, fmt.Errorf("presign %s: %s", s.Name(key), s3Message(err))
	}
	return req.URL, time.Now().Add(ttl).Truncate(time.Second), nil
}

// s3Message is what the bucket said, without the SDK's request ids and retry history.
func s3Message(err error) string {
	var api smithy.APIError
	if errors.As(err, &api) {
		return fmt.Sprintf("%s: %s", api.ErrorCode(), api.ErrorMessage())
	}
	var op *smithy.OperationError
	if errors.As(err, &op) {
		return clean(op.Err)
	}
	return clean(err)
}
