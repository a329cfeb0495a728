package flowagg

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strings"
)

// ReaderConfig says how a reader (routedctl flows) reaches the
// aggregator.
type ReaderConfig struct {
	// URL is the aggregator's base URL.
	URL string
	// Token is the reader's token; CAFile verifies the aggregator's
	// certificate (empty: the system's roots).
	Token  string
	CAFile string
}

// Read streams the entries the filter keeps to fn, following new ones
// when follow is set, until ctx ends, the stream ends or fn fails.
func Read(ctx context.Context, rc ReaderConfig, f Filter, follow bool, fn func(Entry) error) error {
	if rc.URL == "" || rc.Token == "" {
		return fmt.Errorf("%w: the aggregator URL and a reader token are required", ErrConfig)
	}
	if u, err := url.Parse(rc.URL); err != nil || u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%w: the aggregator URL %q is not https://HOST:PORT: the reader token would travel in clear (the aggregator serves HTTPS only)", ErrConfig, rc.URL)
	}
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if rc.CAFile != "" {
		pem, err := os.ReadFile(rc.CAFile)
		if err != nil {
			return fmt.Errorf("flowagg: CA: %w", err)
		}
		tc.RootCAs = x509.NewCertPool()
		if !tc.RootCAs.AppendCertsFromPEM(pem) {
			return fmt.Errorf("%w: CA file %s holds no PEM certificate", ErrConfig, rc.CAFile)
		}
	}
	q := f.Query()
	if follow {
		q.Set("follow", "1")
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(rc.URL, "/")+"/v1/flows?"+q.Encode(), nil)
	if err != nil {
		return fmt.Errorf("flowagg: %w", err)
	}
	req.Header.Set("Authorization", "Bearer "+rc.Token)
	resp, err := (&http.Client{Transport: &http.Transport{TLSClientConfig: tc}}).Do(req)
	if err != nil {
		return fmt.Errorf("flowagg: reaching the aggregator: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("flowagg: the aggregator answered %s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	for sc.Scan() {
		var e Entry
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return fmt.Errorf("flowagg: a line from the aggregator: %w", err)
		}
		if e.Flow == nil && e.Gap == nil {
			continue // keep-alive
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("flowagg: reading the stream: %w", err)
	}
	return nil
}
