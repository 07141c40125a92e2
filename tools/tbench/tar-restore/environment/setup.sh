set -e
mkdir -p site/config site/pages backups
printf '<h1>home</h1>\n' > site/pages/index.html
for d in 01 02 03 04 05 06; do
  case $d in
    01|02) printf 'version: 1\nroutes:\n  - /\n' > site/config/routes.yaml ;;
    03|04) printf 'version: 2\nroutes:\n  - /\n  - /shop   # day %s\n' $d > site/config/routes.yaml ;;
    *) printf 'version 3 ???\n<<<<<<< broken\n' > site/config/routes.yaml ;;
  esac
  echo "day $d" > site/pages/news.html
  tar -czf backups/site-2026-05-$d.tar.gz --mtime="2026-05-$d 00:00Z" site
done
