#!/bin/sh
# deploy.sh — ship the storefront to Heroku and the workers to DigitalOcean.
# Run from the repo root on the release laptop. Requires heroku, doctl, kubectl, vault.
set -eu

export HEROKU_API_KEY=HRKU-AAE6fgSop484ZXp6CW8jJ-lYyMMc77qUxECPbh4-7ZmS9ZhA8QZGvyGDRlBx
export DIGITALOCEAN_ACCESS_TOKEN=dop_v1_e219172b8dad19a92e0261c5a938010c7f394055e6f8485e81908ff347eb81df
export VAULT_ADDR=https://vault.northwind.io:8200
export VAULT_TOKEN=hvs.CAESILZZe00_BI6Ht954focV7fofULLTiJoEzYPv-aAL5sdIGh4KHGh2cy43QzZ1Mmp1ZVp4dU1Tcnp4WEdPbEkzWTY
export PULUMI_ACCESS_TOKEN=pul-c39f657d1c8cd2a060f06c66ea165cfdc7b3dea8
export DOCKER_BUILDKIT=1

VERSION=$(git describe --tags --always)
echo "deploying ${VERSION}"

# 1. storefront
heroku container:login
heroku container:push web --app northwind-storefront --arg VERSION="${VERSION}"
heroku container:release web --app northwind-storefront

# 2. schema changes (mysql, run once per release)
for f in migrations/pending/*.sql; do
  echo "applying ${f}"
  mysql -h storefront-db.internal -u storefront -p'AmyFIw4uT0xg~AB4BpBjExU' storefront < "${f}"
done

# 3. refresh reporting views
psql "postgresql://reporting:hAdcV7fDqegt3WZ10WHxnWX@reporting-db.internal:5432/reporting" \
  -c 'REFRESH MATERIALIZED VIEW CONCURRENTLY daily_sales'

# 4. workers
doctl kubernetes cluster kubeconfig save workers-ams3
doppler secrets download --token dp.pt.cTjahtMpdmpOIioadbjqZa3J5n9IL5WNdNM4y5a3Ji8 --no-file --format env > /tmp/workers.env
kubectl -n workers create secret generic workers-env --from-env-file=/tmp/workers.env --dry-run=client -o yaml | kubectl apply -f -
rm -f /tmp/workers.env
kubectl -n workers set image deployment/notifications notifications="registry.digitalocean.com/northwind/notifications:${VERSION}"
kubectl -n workers rollout status deployment/notifications --timeout=5m

# 5. infra drift check
pulumi stack select northwind/workers/prod
pulumi preview --diff --non-interactive

vault kv patch secret/releases/storefront version="${VERSION}" deployed_at="$(date -u +%FT%TZ)"
echo "done"
