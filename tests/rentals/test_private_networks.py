"""Each account's private network: its own subnet from the operator's pool, made once,
refused clearly when the pool is spent; the names its instances answer to."""

from __future__ import annotations

import pytest

from gpurental.networks.addressing import subnet_of
from gpurental.networks.services import PoolExhausted, names_of, private_network_of
from tests.factories import InstanceFactory, UserFactory


def test_each_account_gets_one_subnet_of_its_own(alice, bob):
    mine = private_network_of(alice)
    assert private_network_of(alice) == mine  # made once
    theirs = private_network_of(bob)
    assert mine.subnet != theirs.subnet
    assert {mine.subnet, theirs.subnet} <= {subnet_of(i) for i in range(theirs.index + 1)}
    assert subnet_of(0) == "10.192.0.0/24" and subnet_of(3) == "10.192.3.0/24"


def test_a_spent_pool_is_refused_with_the_reason(settings, db):
    settings.PRIVATE_NETWORK_POOL = "10.200.0.0/23"  # two /24s
    private_network_of(UserFactory())
    private_network_of(UserFactory())
    with pytest.raises(PoolExhausted, match="no private network is left"):
        private_network_of(UserFactory())


def test_a_launch_is_refused_when_the_pool_is_spent(settings, alice, bob, a100, make_host, image):
    from gpurental.rentals.exceptions import RentalError
    from gpurental.rentals.models import Instance
    from gpurental.rentals.services.lifecycle import instance_launch

    settings.PRIVATE_NETWORK_POOL = "10.200.0.0/24"  # one /24: alice's
    make_host("node1", a100)
    instance_launch(user=alice, image=image, gpu_model=a100, gpu_count=1)
    with pytest.raises(RentalError, match="no private network is left") as err:
        instance_launch(user=bob, image=image, gpu_model=a100, gpu_count=1)
    assert err.value.field == "private_network"
    assert not Instance.objects.filter(user=bob).exists()


def test_names_are_the_id_and_the_name_when_it_is_a_dns_label(alice):
    named = InstanceFactory(user=alice, name="train-0")
    assert names_of(named) == ["train-0.internal", f"{named.pk}.internal"]
    spaced = InstanceFactory(user=alice, name="My notebook")
    assert names_of(spaced) == [f"{spaced.pk}.internal"]
