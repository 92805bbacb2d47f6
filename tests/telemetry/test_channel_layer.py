"""The channel layer's Redis reads outlast its blocking pop, so idle streams stay open."""

import pytest
from channels.layers import get_channel_layer
from django.conf import settings


@pytest.mark.backend
@pytest.mark.skipif(
    settings.CHANNEL_LAYER_BACKEND != "core", reason="only the core layer blocks in BZPOPMIN"
)
def test_layer_socket_timeout_is_longer_than_its_blocking_pop():
    # redis-py 8 defaults to a 5 s socket timeout, the same as channels-redis's 5 s
    # BZPOPMIN: every idle consumer would die with "Timeout reading from socket".
    layer = get_channel_layer()
    pool = layer.create_pool(0)
    assert pool.connection_kwargs["socket_timeout"] > layer.brpop_timeout
