#!/bin/sh
# RabbitMQ 3.10 for the Compose layout: amqps on 5671 only (no plain listener), the
# management API on 15672 for the per-host accounts, the admin password and the Erlang
# cookie from /run/secrets, the server certificate from /run/secrets/tls.
set -eu
SECRETS=${SECRETS_DIR:-/run/secrets}
umask 077
rm -f /var/lib/rabbitmq/.erlang.cookie
head -n1 "$SECRETS/erlang_cookie" | tr -d '\n' >/var/lib/rabbitmq/.erlang.cookie
chmod 400 /var/lib/rabbitmq/.erlang.cookie
cat >/etc/rabbitmq/rabbitmq.conf <<CONF
listeners.tcp = none
listeners.ssl.default = 5671
ssl_options.cacertfile = $SECRETS/tls/ca.pem
ssl_options.certfile = $SECRETS/tls/broker.pem
ssl_options.keyfile = $SECRETS/tls/broker.key
ssl_options.verify = verify_none
ssl_options.versions.1 = tlsv1.3
ssl_options.versions.2 = tlsv1.2
management.tcp.port = 15672
default_user = admin
default_pass = $(head -n1 "$SECRETS/rabbitmq_password")
default_permissions.configure = .*
default_permissions.read = .*
default_permissions.write = .*
default_user_tags.administrator = true
loopback_users = none
CONF
export RABBITMQ_NODENAME=rabbit@localhost RABBITMQ_MNESIA_BASE=/var/lib/rabbitmq/mnesia
exec rabbitmq-server
