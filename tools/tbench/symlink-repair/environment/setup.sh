set -e
mkdir -p docs/guide docs/api/v1 docs/api/v2 docs/shared
printf 'style\n' > docs/shared/style.css
printf 'intro\n' > docs/guide/intro.md
printf 'v1 ref\n' > docs/api/v1/reference.md
printf 'v2 ref\n' > docs/api/v2/reference.md
ln -s /srv/olddocs/shared/style.css docs/guide/style.css
ln -s /srv/olddocs/shared/style.css docs/api/v2/style.css
ln -s /srv/olddocs/api/v2/reference.md docs/api/latest.md
ln -s /srv/olddocs/guide/intro.md docs/README.md
ln -s /srv/olddocs/api/v1 docs/api/stable
