set -e
chmod 644 deploy/bin/run.sh
chmod 600 deploy/bin/check.sh
chmod 666 deploy/config/secrets.env
chmod 600 deploy/config/app.conf
chmod 777 deploy/config/logging.conf
chmod 777 deploy deploy/config
