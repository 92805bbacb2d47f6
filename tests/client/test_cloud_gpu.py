"""``cloud_gpu``, the article's name for the SDK, in the server's own install too (the
wheel's is tested in test_distribution.py), and the link ``connect()`` returns."""

from __future__ import annotations

import gpurental.client
from gpurental.client.models import Link


def test_cloud_gpu_is_the_sdk_under_the_articles_name():
    import cloud_gpu

    assert cloud_gpu.Client is gpurental.client.Client
    assert set(cloud_gpu.__all__) == set(gpurental.client.__all__)
    assert all(
        getattr(cloud_gpu, name) is getattr(gpurental.client, name) for name in cloud_gpu.__all__
    )


def test_a_link_is_a_string_shown_bare_in_a_repl_and_clickable_in_a_notebook():
    link = Link('http://i.gw.localhost:8001/_gw/enter?t=a"b')
    assert isinstance(link, str) and link == 'http://i.gw.localhost:8001/_gw/enter?t=a"b'
    assert repr(link) == 'http://i.gw.localhost:8001/_gw/enter?t=a"b'  # no quotes around it
    assert link._repr_html_() == (
        '<a href="http://i.gw.localhost:8001/_gw/enter?t=a&quot;b" target="_blank" '
        'rel="noopener">Open JupyterLab</a> (http://i.gw.localhost:8001/_gw/enter?t=a&quot;b)'
    )
