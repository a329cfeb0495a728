# failed.awk sums up what failed in `go test` output (make test runs it
# over bin/test-main.log and bin/test-long.log when anything failed).
# For each '--- FAIL' it prints the test's logged lines: all of them when
# there are few, else the first 8 and the last 40, since a test's reason
# to fail (t.Fatal) comes last and its set-up logs first. FAIL lines and
# panics are printed as they are.
function flush(   i) {
	if (name == "")
		return
	print name
	if (n <= 48) {
		for (i = 1; i <= n; i++)
			print buf[i]
	} else {
		for (i = 1; i <= 8; i++)
			print buf[i]
		print "        ... (" n - 48 " lines left out) ..."
		for (i = n - 39; i <= n; i++)
			print buf[i]
	}
	name = ""
	n = 0
}
/^[[:space:]]*--- FAIL/ { flush(); name = $0; next }
name != "" && /^[[:space:]]/ { buf[++n] = $0; next }
{ flush() }
/^FAIL|^panic: / { print }
END { flush() }
