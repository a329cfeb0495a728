package flowagg

import (
	"crypto/sha256"
	"encoding/base64"
	"net/http"
	"regexp"
)

// inlineHash is the CSP source of each inline <script> and <style>
// element of html, by kind: the page's policy allows exactly these and
// no other inline code.
func inlineHashes(html []byte) (scripts, styles string) {
	for _, k := range []struct {
		re  *regexp.Regexp
		out *string
	}{{regexp.MustCompile(`(?s)<script>(.*?)</script>`), &scripts}, {regexp.MustCompile(`(?s)<style>(.*?)</style>`), &styles}} {
		for _, m := range k.re.FindAllSubmatch(html, -1) {
			sum := sha256.Sum256(m[1])
			*k.out += " 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
		}
	}
	if scripts == "" {
		scripts = " 'none'"
	}
	if styles == "" {
		styles = " 'none'"
	}
	return scripts, styles
}

// pageCSP is the Content-Security-Policy of a page html: its own inline
// script and style by hash, requests to the aggregator only, no frames,
// forms posting only here.
func pageCSP(html []byte) string {
	scripts, styles := inlineHashes(html)
	return "default-src 'none'; script-src" + scripts + "; style-src" + styles +
		"; connect-src 'self'; img-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
}

// setPageHeaders sets what every HTML answer carries: the CSP, no
// caching, no sniffing, no framing, no referrer.
func setPageHeaders(h http.Header, csp string) {
	h.Set("Content-Security-Policy", csp)
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Content-Type", "text/html; charset=utf-8")
}
