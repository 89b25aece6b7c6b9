package artifacts

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/Azure/azure-sdk-for-go/sdk/azcore"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/blockblob"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/container"
	"github.com/Azure/azure-sdk-for-go/sdk/storage/azblob/sas"
)

// azStore is an Azure Blob Storage container. Its account comes from
// AZURE_STORAGE_CONNECTION_STRING, else AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY (with
// AZURE_STORAGE_BLOB_ENDPOINT, else https://ACCOUNT.blob.core.windows.net/): a shared key,
// which also signs the SAS URLs that download a blob.
type azStore struct {
	container, prefix string
	client            *container.Client
	public            string
}

func openAzblob(name, prefix string, opts Options) (*azStore, error) {
	var (
		svc *azblob.Client
		err error
	)
	if cs := os.Getenv("AZURE_STORAGE_CONNECTION_STRING"); cs != "" {
		if strings.Contains(cs, "SharedAccessSignature=") && opts.PublicURL == "" {
			return nil, fmt.Errorf("artifacts store azblob://%s: a connection string with a SAS cannot sign the URLs that download blobs: give the account key, or --artifacts-public-url for a public container", name)
		}
		svc, err = azblob.NewClientFromConnectionString(cs, nil)
	} else {
		account, key := os.Getenv("AZURE_STORAGE_ACCOUNT"), os.Getenv("AZURE_STORAGE_KEY")
		if account == "" || key == "" {
			return nil, fmt.Errorf("artifacts store azblob://%s: set AZURE_STORAGE_CONNECTION_STRING, or AZURE_STORAGE_ACCOUNT and AZURE_STORAGE_KEY", name)
		}
		endpoint := os.Getenv("AZURE_STORAGE_BLOB_ENDPOINT")
		if endpoint == "" {
			endpoint = "https://" + account + ".blob.core.windows.net/"
		}
		var cred *azblob.SharedKeyCredential
		if cred, err = azblob.NewSharedKeyCredential(account, key); err == nil {
			svc, err = azblob.NewClientWithSharedKeyCredential(endpoint, cred, nil)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("artifacts store azblob://%s: %w", name, err)
	}
	return &azStore{container: name, prefix: prefix, client: svc.ServiceClient().NewContainerClient(name), public: opts.PublicURL}, nil
}

func (s *azStore) Key(tenant, session, rel string) string { return Key(s.prefix, tenant, session, rel) }

func (s *azStore) Name(key string) string { return "azblob://" + s.container + "/" + key }

// Put streams body in blocks of 4 MiB, two at a time: the server's memory stays flat.
func (s *azStore) Put(ctx context.Context, key string, body io.Reader, size int64, contentType string) error {
	n := &countReader{r: body}
	_, err := s.client.NewBlockBlobClient(key).UploadStream(ctx, n, &blockblob.UploadStreamOptions{BlockSize: 4 << 20, Concurrency: 2,
		HTTPHeaders: &blob.HTTPHeaders{BlobContentType: &contentType}})
	if err != nil {
		return fmt.Errorf("upload to %s: %s", s.Name(key), azMessage(err))
	}
	if n.n != size {
		return fmt.Errorf("the file for %s was %d bytes, not %d: it changed while it was read", s.Name(key), n.n, size)
	}
	return nil
}

func (s *azStore) URL(ctx context.Context, key string, ttl time.Duration) (string, time.Time, error) {
	if s.public != "" {
		return publicURL(s.public, key), time.Time{}, nil
	}
	exp := time.Now().Add(min(ttl, MaxTTL)).Truncate(time.Second)
	u, err := s.client.NewBlobClient(key).GetSASURL(sas.BlobPermissions{Read: true}, exp, nil)
	if err != nil {
		return "", time.Time{}, fmt.Errorf("sign a URL to %s: %s", s.Name(key), azMessage(err))
	}
	// The SDK escapes the name's slashes (%2F); the service takes them as they are, and
	// the signature is over the name, not its spelling: a link with folders in it reads as
	// one.
	_, query, _ := strings.Cut(u, "?")
	return publicURL(s.client.URL(), key) + "?" + query, exp, nil
}

// azMessage is what the service said, without the SDK's request dump.
func azMessage(err error) string {
	var re *azcore.ResponseError
	if errors.As(err, &re) {
		return fmt.Sprintf("%s (HTTP %d)", re.ErrorCode, re.StatusCode)
	}
	return clean(err)
}

type countReader struct {
	r io.Reader
	n int64
}

func (c *countReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}
