#!/usr/bin/env bash
# Runs every check and test of Toolgate on a fresh machine with Go installed.
# The tools it needs are installed at pinned versions into .ci/bin first.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
bin=$root/.ci/bin
export PATH="$bin:$PATH"
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"

# Pinned tool versions ("name package@version [build tags]"). protoc-gen-go matches
# google.golang.org/protobuf in go.mod. promtool (v0.316.0 is Prometheus 3.16.0) checks and
# unit-tests operate/'s alert rules and the dashboard's queries (operate/operate_test.go); built
# with Prometheus' remove_all_sd tag it leaves out the cloud service discoveries, which rule
# checks never use: half the download and under half the build time of a full promtool.
tools=(
  "buf github.com/bufbuild/buf/cmd/buf@v1.75.0"
  "protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12"
  "protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2"
  "grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl@v1.9.3"
  "minio github.com/minio/minio@v0.0.0-20260212201848-7aac2a2c5b7c"
  "promtool github.com/prometheus/prometheus/cmd/promtool@v0.316.0 remove_all_sd"
)
step() { printf '\n==> %s\n' "$*"; }

step "installing pinned tools into .ci/bin"
mkdir -p "$bin"
for t in "${tools[@]}"; do
  read -r name pkg tags <<<"$t"
  stamp="$bin/.$name@${pkg##*@}${tags:++$tags}"
  if [ ! -x "$bin/$name" ] || [ ! -f "$stamp" ]; then
    (cd "$(mktemp -d)" && GOBIN="$bin" go install ${tags:+-tags "$tags"} "$pkg")
    rm -f "$bin/.$name@"*
    touch "$stamp"
  fi
  echo "$name ${pkg##*@}${tags:+ (tags $tags)}"
done

step "gofmt"
unformatted=$(gofmt -l $(git ls-files '*.go'))
if [ -n "$unformatted" ]; then echo "not gofmt'd:"; echo "$unformatted"; exit 1; fi

step "go mod tidy (no diff allowed)"
go mod tidy -diff

step "go vet"
go vet ./...

step "buf lint, and generated code matches proto/"
(cd proto && buf lint && buf generate)
if [ -n "$(git status --porcelain -- proto)" ]; then
  echo "generated code is stale; run 'cd proto && buf generate' and commit:"
  git status --porcelain -- proto
  git diff --stat -- proto
  exit 1
fi

step "buf breaking: the API stays compatible with its released baseline"
# .ci/proto-baseline holds gateway.proto as released; a change that would
# break an existing client fails here. Move the baseline only with a release.
(cd proto && buf breaking --against ../.ci/proto-baseline)

step "the published TPMJS client, at pinned versions, for the TPMJS front door's tests"
# package-lock.json pins @tpmjs/registry-execute and @tpmjs/registry-search 0.1.5 and
# their dependencies by integrity hash; the tests run them unmodified with node.
(cd gateway/frontdoor/tpmjs/testdata/npm && npm ci --ignore-scripts --no-audit --no-fund)

step "the MCP TypeScript SDK and the MCP Inspector, at pinned versions, for the MCP front door's tests"
# package-lock.json pins @modelcontextprotocol/sdk 1.32.2 and @modelcontextprotocol/inspector 2.12.0
# by integrity hash. The Inspector asks for node >= 22.19 (npm warns EBADENGINE); its CLI mode, the
# only part the tests run, works on node 20, and its postinstall (the web and TUI clients) is not needed.
(cd gateway/frontdoor/mcp/testdata/npm && npm ci --ignore-scripts --no-audit --no-fund)
(cd gateway/frontdoor/mcp/testdata/inspector && npm ci --ignore-scripts --no-audit --no-fund)

step "two agent frameworks' MCP clients, at pinned versions, for the MCP approval path without _meta"
# package-lock.json pins the Vercel AI SDK's MCP client (@ai-sdk/mcp 2.0.99, experimental_createMCPClient)
# and LangChain's MCP adapters (@langchain/mcp-adapters 1.1.4, with @langchain/core 1.4.0 and
# @langchain/langgraph 1.7.3) by integrity hash: about 94 MB. @ai-sdk/* ask for node >= 22 (npm warns
# EBADENGINE); their MCP client and tool calling, all the tests run, work on node 20.
(cd gateway/frontdoor/mcp/testdata/frameworks && npm ci --ignore-scripts --no-audit --no-fund)

step "headless Chromium, playwright-core and axe-core, for the console's browser test"
# The operating system's Chromium (Debian's package), installed only when missing; package-lock.json
# pins playwright-core 1.65.1 (pointed at /usr/bin/chromium, it downloads no browser) and axe-core
# 4.14.1 by integrity hash: about 18 MB.
if [ ! -x /usr/bin/chromium ]; then
  apt-get update -qq && apt-get install -y --no-install-recommends chromium
fi
(cd cmd/toolgate/testdata/console && npm ci --ignore-scripts --no-audit --no-fund)

# The end-to-end suites (cmd/toolgate: the real binary, MinIO, the npm clients, a browser) take
# longest; they start first, in the background, so the packages' own tests, the fuzz targets and
# the benchmarks run beside them (much of the suites' time is spent waiting on the processes they
# start), and they report as a step of their own once those are done. Their tests run in parallel
# (t.Parallel), the fault suite alone first; on a 2-core machine that other work also loads they
# still take longer than go test's default 10 minutes per package, hence the raised limit.
step "go test -race: end-to-end suites (cmd/toolgate), started in the background"
# The suites' exit status goes to a file: bash forgets a finished background job's status when a
# later child reuses its process id, which thousands of short-lived processes (the fuzz targets,
# the benchmarks) can bring about before the suites are waited for.
e2e_log=$(mktemp)
e2e_rc=$(mktemp -u)
(
  set +e
  go test -race -count=1 -timeout=30m ./cmd/toolgate > "$e2e_log" 2>&1
  echo $? > "$e2e_rc"
) &
e2e=$!
trap '[ -e "$e2e_rc" ] || { pkill -P "$e2e"; kill "$e2e"; } 2>/dev/null || true' EXIT

step "go test -race: every other package"
# Beside the end-to-end suites, gateway's parallel tests (their real listeners, stores and
# replicas) can outlast the default 10 minutes when other work loads the machine too; the limit
# is raised so the verdict does not depend on the machine's load.
go test -race -count=1 -timeout=20m $(go list ./... | grep -v '/cmd/toolgate$')

step "fuzz targets, briefly"
# A count, not a duration: with a duration, Go 1.26's fuzz coordinator can report a spurious
# "context deadline exceeded" when the time runs out mid-execution on a busy machine
# (go.dev/issue/75804, fixed in Go 1.27).
fuzztime=${FUZZTIME:-20000x}
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for target in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "fuzz $pkg $target ($fuzztime)"
    go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg" > /tmp/toolgate-fuzz.log 2>&1 || { cat /tmp/toolgate-fuzz.log; exit 1; }
  done
done

step "benchmarks compile and run (one iteration each)"
go test -run='^$' -bench=. -benchtime=1x ./... > /tmp/toolgate-bench.log 2>&1 || { cat /tmp/toolgate-bench.log; exit 1; }
grep -c '^Benchmark' /tmp/toolgate-bench.log | sed 's/^/benchmarks run: /'

step "go test -race: end-to-end suites (cmd/toolgate)"
wait "$e2e" 2>/dev/null || true
trap - EXIT
if [ "$(cat "$e2e_rc" 2>/dev/null)" != 0 ]; then cat "$e2e_log"; exit 1; fi
cat "$e2e_log"

step "redaction against gitleaks' detector (its own module, so the detector stays out of go.mod)"
# Built the way gitleaks' release binaries are: with its RE2 engine (build tag gore2regex).
(
  cd redact/gitleaksbench
  go mod tidy -diff
  go vet -tags gore2regex ./...
  go test -race -count=1 -tags gore2regex ./...
  go test -count=1 -tags gore2regex -run='^$' -bench=. -benchtime="${BENCHTIME_GITLEAKS:-1x}" ./...
) > /tmp/toolgate-gitleaks.log 2>&1 || { cat /tmp/toolgate-gitleaks.log; exit 1; }
grep -E '^(ok|Benchmark)' /tmp/toolgate-gitleaks.log

step "deploy: the image, the Helm chart, and three replicas on one bucket (its own module)"
# Helm, the Kubernetes API types and go-containerregistry stay out of go.mod. The tests build
# the image twice (reproducible), render the chart with Helm's Go packages (helm lint --strict,
# helm template), decode every manifest strictly, have toolgate check config accept a pod's
# configuration, and run three replicas as the chart renders them against MinIO.
(
  cd deploy
  go mod tidy -diff
  go vet ./...
  go test -race -count=1 -timeout=20m ./...
) > /tmp/toolgate-deploy.log 2>&1 || { cat /tmp/toolgate-deploy.log; exit 1; }
grep -E '^(ok|---)' /tmp/toolgate-deploy.log

step "all checks passed"
