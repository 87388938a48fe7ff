"""ACEBench's English travel scenario (an airline desk), reimplemented for its agent_multi_turn items:
three users, eleven flights and four reservations, with the same starting data, the same checks in the
same order, the same state changes and the same result texts as
`model_inference/multi_turn/scenariosen/travel.py` at github ACEBench/ACEBench e6db74b (MIT; the
multi-step copy is identical). Written from its behaviour, not copied; agreement is pinned by
tests/fixtures/acebench/travel_official.json.

What an agent can change, and what the official evaluation reads back (`saved`): users (balances)
and reservations. Flights change too (a booking takes a seat) but are not read back. Every public
method is callable, the helpers included (authenticate_user, update_balance, process_refund, ...:
the official execution does not limit an agent to the item's listed functions); a helper given an
agent's own dict changes that dict, not the state. The official quirks are kept: a wrong password
still books (authentication returns an error dict, which is truthy, and the booking then fails on
its missing membership level), a second "CZ1765" is never found (the first match wins), a cabin
change is priced on the flight before a flight change, an unknown cabin is worth 0 (changing to it
refunds the old price), a baggage fee counts every bag above the allowance, cancelling refunds to
cash and keeps the reservation, and the clock is fixed at 2024-07-14 06:00 for cancellations.
`process_refund` prints nothing here (officially it prints a line).
"""
from __future__ import annotations

from datetime import datetime, timedelta

_USERS = {  # id: (name, password, cash, bank, membership)
    "user1": ("Eve", "password123", 2000.0, 50000.0, "regular"),
    "user2": ("Frank", "password456", 8000.0, 8000.0, "silver"),
    "user3": ("Grace", "password789", 1000.0, 5000.0, "gold"),
}
_FLIGHTS = (  # flight_no, origin, destination, departs, arrives (2024-07-dd hh:mm), seats, economy, business
    ("CA1234", "Beijing", "Shanghai", "15 08:00", "15 10:30", 5, 1200, 3000),
    ("MU5678", "Shanghai", "Beijing", "16 09:00", "16 11:30", 3, 1900, 3000),
    ("CZ4321", "Shanghai", "Beijing", "16 20:00", "16 22:00", 8, 2500, 4000),
    ("CZ4352", "Shanghai", "Beijing", "17 20:00", "17 22:00", 8, 1600, 2500),
    ("MU3561", "Beijing", "Nanjing", "18 08:00", "18 10:00", 8, 1500, 4000),
    ("MU1566", "Beijing", "Nanjing", "18 20:00", "18 22:00", 8, 1500, 4000),
    ("CZ1765", "Nanjing", "Shenzhen", "17 20:30", "17 22:00", 8, 1500, 2500),
    ("CZ1765", "Nanjing", "Shenzhen", "18 12:30", "18 15:00", 8, 1500, 2500),
    ("MH1765", "Xiamen", "Chengdu", "17 12:30", "17 15:00", 8, 1500, 2500),
    ("MH2616", "Chengdu", "Xiamen", "18 18:30", "18 21:00", 8, 1500, 2500),
    ("MH2616", "Chengdu", "Fuzhou", "16 18:30", "16 21:00", 8, 1500, 2500),
)
_RESERVATIONS = (  # id, user, flight_no, cabin, origin, destination (paid by bank, one bag);
    ("res_1", "user1", "CA1234", "Economy Class", "Beijing", "Shanghai"),   # res_4's MU2616 is no flight
    ("res_2", "user1", "MU5678", "Business Class", "Shanghai", "Beijing"),
    ("res_3", "user2", "MH1765", "Business Class", "Xiamen", "Chengdu"),
    ("res_4", "user2", "MU2616", "Business Class", "Chengdu", "Xiamen"),
)
_FREE_BAGS = {"regular": {"Economy Class": 1, "Business Class": 2}, "silver": {"Economy Class": 2, "Business Class": 3},
              "gold": {"Economy Class": 3, "Business Class": 3}}
_BALANCES = {"cash": "cash_balance", "bank": "bank_balance"}
_NOW = datetime(2024, 7, 14, 6, 0, 0)   # the clock cancel_reservation reads
_TIME = "%Y-%m-%d %H:%M:%S"
_AIRLINE_CANCELLED = "The airline has canceled the flight."
_NO_LOGIN = {"status": "error", "message": "Incorrect username or password."}


def _stamp(day_time: str) -> str:
    return f"2024-07-{day_time}:00"


def _first(rows, **match):
    return next((r for r in rows if all(r[k] == v for k, v in match.items())), None)


class Travel:
    saved = ("users", "reservations")

    def __init__(self):
        self.users = {uid: {"user_name": n, "password": p, "cash_balance": c, "bank_balance": b, "membership_level": m}
                      for uid, (n, p, c, b, m) in _USERS.items()}
        self.flights = [{"flight_no": no, "origin": o, "destination": d, "depart_time": _stamp(dep),
                         "arrival_time": _stamp(arr), "status": "available", "seats_available": seats,
                         "economy_price": eco, "business_price": bus}
                        for no, o, d, dep, arr, seats, eco, bus in _FLIGHTS]
        self.reservations = [{"reservation_id": rid, "user_id": uid, "flight_no": no, "payment_method": "bank",
                              "cabin": cabin, "baggage": 1, "origin": o, "destination": d}
                             for rid, uid, no, cabin, o, d in _RESERVATIONS]

    def _load_scenario(self, scenario: dict, long_context: bool = False) -> None:
        """Officially a no-op: the travel items start from the data above."""

    # ------------------------------------------------------------------ queries

    def get_flight_details(self, origin: str = None, destination: str = None):
        found = [f for f in self.flights if not origin or f["origin"] == origin]
        found = [f for f in found if not destination or f["destination"] == destination]
        if not found:
            return "There are no direct flights that meet the criteria."
        return [dict(f) for f in found]

    def get_user_details(self, user_id: str, password: str):
        user = self.users.get(user_id)
        if not (user and user["password"] == password):
            return dict(_NO_LOGIN)
        return {k: v for k, v in user.items() if k != "password"}

    def get_reservation_details(self, reservation_id: str = None, user_id: str = None):
        if reservation_id:
            picked = [r for r in self.reservations if r["reservation_id"] == reservation_id]
        elif user_id:
            picked = [r for r in self.reservations if r["user_id"] == user_id]
        else:
            return {"status": "error", "message": "Please provide a valid reservation ID or user ID"}
        return [{**r, "flight_info": _first(self.flights, flight_no=r["flight_no"])} for r in picked]

    def authenticate_user(self, user_id, password):
        user = self.users.get(user_id)
        return user if user and user["password"] == password else dict(_NO_LOGIN)

    def get_baggage_allowance(self, membership_level, cabin_class):
        return _FREE_BAGS.get(membership_level, {}).get(cabin_class, 0)

    def find_transfer_flights(self, origin_city, transfer_city, destination_city):
        legs1 = [f for f in self.flights if f["origin"] == origin_city and f["destination"] == transfer_city
                 and f["status"] == "available"]
        legs2 = [f for f in self.flights if f["origin"] == transfer_city and f["destination"] == destination_city
                 and f["status"] == "available"]
        pairs = []
        for one in legs1:
            lands = datetime.strptime(one["arrival_time"], _TIME)
            pairs += [{"first_leg": one, "second_leg": two} for two in legs2
                      if lands < datetime.strptime(two["depart_time"], _TIME)]
        return pairs or "No connecting flights that meet the criteria were found."

    def calculate_baggage_fee(self, membership_level, cabin_class, baggage_count):
        free = _FREE_BAGS[membership_level][cabin_class]
        return max(baggage_count - free, 0) * 50

    def update_balance(self, user, payment_method, amount):
        key = _BALANCES.get(payment_method) if isinstance(payment_method, str) else None
        if key is not None:
            if user[key] + amount < 0:
                return False
            user[key] += amount
        return True

    def calculate_price_difference(self, flight, old_cabin, new_cabin):
        prices = {"Economy Class": flight["economy_price"], "Business Class": flight["business_price"]}
        old = prices.get(old_cabin, 0)
        return prices.get(new_cabin, 0) - old

    # ------------------------------------------------------------------ changes

    def reserve_flight(self, user_id, password, flight_no, cabin, payment_method, baggage_count):
        user = self.authenticate_user(user_id, password)   # an error dict when the login fails: never falsy
        flight = _first(self.flights, flight_no=flight_no, status="available")
        cost = flight["economy_price"] if cabin == "Economy Class" else flight["business_price"]
        cost += self.calculate_baggage_fee(user["membership_level"], cabin, baggage_count)
        if payment_method not in ["cash", "bank"]:
            return "Invalid payment method"
        balance = "cash_balance" if payment_method == "cash" else "bank_balance"
        if cost > self.users.get(user_id)[balance]:
            return f"Your {payment_method} balance is insufficient. Please consider using another payment method."
        self.users.get(user_id)[balance] -= cost
        flight["seats_available"] -= 1
        rid = f"res_{len(self.reservations) + 1}"
        self.reservations.append({"reservation_id": rid, "user_id": user_id, "flight_no": flight_no,
                                  "payment_method": payment_method, "cabin": cabin, "baggage": baggage_count})
        return f"Booking successful. Reservation ID: {rid}. Total cost: {cost} yuan (including baggage fees)."

    def modify_flight(self, user_id, reservation_id, new_flight_no=None, new_cabin=None, add_baggage=0,
                      new_payment_method=None):
        booking = _first(self.reservations, reservation_id=reservation_id, user_id=user_id)
        if not booking:
            return "Reservation not found or user ID does not match."
        flight = _first(self.flights, flight_no=booking["flight_no"])
        if not flight:
            return "Flight information not found."
        pay = new_payment_method or booking["payment_method"]
        user = self.users[user_id]
        if not user:
            return "User information not found."
        done = []
        if new_flight_no and new_flight_no != booking["flight_no"]:
            new = _first(self.flights, flight_no=new_flight_no)
            if not (new and new["origin"] == flight["origin"] and new["destination"] == flight["destination"]):
                return "Flight change failed: Invalid new flight number or destination does not match."
            booking["flight_no"] = new_flight_no
            done.append("Flight number has been changed.")
        if new_cabin and new_cabin != booking.get("cabin"):
            diff = self.calculate_price_difference(flight, booking["cabin"], new_cabin)   # the old flight's prices
            booking["cabin"] = new_cabin
            if diff > 0:
                done.append(f"Cabin change successful. Price difference paid: {diff}."
                            if self.update_balance(user, pay, -diff) else
                            "Insufficient balance to pay the cabin price difference.")
            elif diff < 0:
                self.update_balance(user, pay, -diff)
                done.append(f"Cabin change successful. Price difference refunded: {-diff}.")
        if add_baggage > 0:
            free = self.get_baggage_allowance(user["membership_level"], booking["cabin"])
            bags = booking.get("baggage", 0) + add_baggage
            fee = max(0, bags - free) * 50
            if fee > 0:
                done.append(f"Baggage has been added. Additional fee to be paid: {fee}."
                            if self.update_balance(user, pay, -fee) else
                            "Insufficient balance to pay the additional baggage fees.")
            booking["baggage"] = bags
        return " ".join(done or ["Modification completed with no additional fees."])

    def cancel_reservation(self, user_id, reservation_id, reason):
        user = self.users.get(user_id, None)
        if not user:
            return "Invalid user ID."
        booking = _first(self.reservations, reservation_id=reservation_id, user_id=user_id)
        if not booking:
            return "Invalid reservation ID or it does not belong to the user."
        flight = _first(self.flights, flight_no=booking["flight_no"])
        if not flight:
            return "Invalid flight information."
        departs = datetime.strptime(flight["depart_time"], _TIME)
        if _NOW > departs:
            return "The flight segment has been used and cannot be canceled."
        price = flight["economy_price"] if booking["cabin"] == "Economy Class" else flight["business_price"]
        if reason == _AIRLINE_CANCELLED:
            self.process_refund(user, price)
            return (f"The flight has been canceled. Your reservation will be canceled free of charge, and {price} "
                    "yuan has been refunded.")
        if departs - _NOW > timedelta(days=1):
            self.process_refund(user, price)
            return f"More than 24 hours before departure. Free cancellation successful, {price} yuan has been refunded."
        fee = price * 0.1
        self.process_refund(user, price - fee)
        return (f"Less than 24 hours before departure. A cancellation fee of {fee} yuan has been deducted, and "
                f"{price - fee} yuan has been refunded.")

    def process_refund(self, user, amount):
        user["cash_balance"] += amount
        user["user_name"]   # officially read for the printed line (a KeyError without it)


CLASSES = {"Travel": Travel}
