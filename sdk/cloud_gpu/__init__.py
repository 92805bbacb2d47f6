"""``cloud_gpu``: the source article's name for the gpurental SDK, so that its snippet runs
as written::

    from cloud_gpu import Client
    client = Client(api_key="YOUR_KEY")
    instance = client.create_instance(gpu_type="A10G", framework="pytorch-2.1", model_repo="huggingface")
    instance.connect()

The platform's URL comes from GPURENTAL_URL, else from `gpurental login`'s config file
(else http://127.0.0.1:8000, where `make demo` serves). Everything here is
``gpurental.client``'s; both the server's install and the gpurental-client wheel have it.
"""

from gpurental.client import *  # noqa: F403 - the same names, by design
from gpurental.client import __all__ as __all__
