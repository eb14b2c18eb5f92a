from __future__ import annotations

import pytest

from paymanager.roles import KNOWN_MISTAKES, Role, UnknownRoleError, parse_roles


def test_default_is_api_and_outbox_worker() -> None:
    assert parse_roles(None) == {Role.API, Role.OUTBOX_WORKER}
    assert parse_roles("") == {Role.API, Role.OUTBOX_WORKER}
    assert parse_roles(" , ,") == {Role.API, Role.OUTBOX_WORKER}


def test_spaces_and_empty_items_are_ignored() -> None:
    assert parse_roles(" api, outbox-worker, ") == {Role.API, Role.OUTBOX_WORKER}
    assert parse_roles("psp-worker,,invoice-expiry") == {Role.PSP_WORKER, Role.INVOICE_EXPIRY}


def test_all_means_every_role() -> None:
    assert parse_roles("all") == set(Role)
    assert parse_roles("api, all") == set(Role)


def test_names_are_case_insensitive() -> None:
    assert parse_roles("API,Outbox-Worker") == {Role.API, Role.OUTBOX_WORKER}


@pytest.mark.parametrize(("mistake", "meant"), sorted(KNOWN_MISTAKES.items()))
def test_each_known_mistake_says_what_was_meant(mistake: str, meant: str) -> None:
    with pytest.raises(UnknownRoleError) as caught:
        parse_roles(f"api,{mistake}")
    message = str(caught.value)
    assert f"'{mistake}' is not a role; did you mean {meant}?" in message
    assert "Valid roles: api, outbox-worker, psp-worker, invoice-expiry, session-cleanup" in message


def test_unknown_name_lists_valid_roles() -> None:
    with pytest.raises(UnknownRoleError) as caught:
        parse_roles("api,frobnicator")
    assert caught.value.unknown == ["frobnicator"]
    assert "did you mean" not in str(caught.value)
    assert "Valid roles:" in str(caught.value)


def test_unknown_name_beside_all_is_still_refused() -> None:
    with pytest.raises(UnknownRoleError):
        parse_roles("all,outbox")
