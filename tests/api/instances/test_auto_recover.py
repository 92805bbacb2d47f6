"""auto_recover through the API: at launch, and turned on or off later."""


def test_the_api_sets_it_at_launch_and_later(as_alice, image, a100, make_host, sent):
    make_host("node1", a100)
    created = as_alice.post(
        "/api/v1/instances/",
        {"gpu_model": a100.slug, "gpu_count": 1, "image": image.slug, "auto_recover": True},
        format="json",
    )
    assert created.status_code == 201, created.content
    assert created.json()["auto_recover"] is True and created.json()["recovered_as"] is None
    pk = created.json()["id"]
    off = as_alice.post(f"/api/v1/instances/{pk}/auto-recover/", {"enabled": False}, format="json")
    assert off.status_code == 200 and off.json()["auto_recover"] is False
    bad = as_alice.post(
        f"/api/v1/instances/{pk}/auto-recover/", {"enabled": "maybe"}, format="json"
    )
    assert bad.status_code == 400 and "enabled" in bad.content.decode()
