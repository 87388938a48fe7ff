"""ACEBench's English phone platform, reimplemented for its agent_multi_step items: BaseApi (Wi-Fi,
device login), MessageApi (an inbox of six users' messages), ReminderApi and FoodPlatform (a
food-delivery platform), with the same starting data, the same checks in the same order, the same
state changes and the same result texts as `model_inference/multi_step/scenariosen/phone_platform/*`
at github ACEBench/ACEBench e6db74b (MIT). Written from its behaviour, not copied.

What an agent can change, and what the official evaluation reads back (`saved`): BaseApi wifi,
logged_in; MessageApi inbox; ReminderApi reminder_list; FoodPlatform users, logged_in_users,
orders. Every public method of an instance is callable (the official execution does not limit an
agent to the item's listed functions); MessageApi, ReminderApi and FoodPlatform each carry their own
copy of BaseApi's wifi and logged_in flags.
"""
from __future__ import annotations

import copy
from datetime import datetime

_PEOPLE = ("Eve", "Frank", "Grace", "Helen", "Isaac", "Jack")
_PHONE_USERS = {name: {"user_id": f"USR{100 + i}", "phone_number": phone, "occupation": job}
                for i, (name, phone, job) in enumerate(zip(_PEOPLE, (
                    "123-456-7890", "234-567-8901", "345-678-9012", "456-789-0123", "567-890-1234", "678-901-2345"), (
                    "Software Engineer", "Data Scientist", "Product Manager", "UX Designer", "DevOps Engineer",
                    "Marketing Specialist")))}
_INBOX = {  # id: (sender, receiver, text, date)
    1: ("USR100", "USR101", "Hey Frank, don't forget about our meeting on 2024-06-11 at 4 PM in Conference Room 1.",
        "2024-06-09"),
    2: ("USR101", "USR102", 'Can you help me order a "Margherita Pizza" delivery? The merchant is Domino\'s.',
        "2024-03-09"),
    3: ("USR102", "USR103", "Please check the milk tea delivery options available from Heytea and purchase a cheaper "
        'milk tea for me. After making the purchase, remember to reply to me with "Already bought."', "2023-12-05"),
    4: ("USR103", "USR102", "No problem Helen, I can assist you.", "2024-09-09"),
    5: ("USR104", "USR105", "Isaac, are you available for a call?", "2024-06-06"),
    6: ("USR105", "USR104", "Yes Jack, let's do it in 30 minutes.", "2024-01-15"),
}
_REMINDERS = (  # (title, description, time)
    ("Doctor's Appointment", "Visit Dr. Smith for a checkup.", "2024-07-15 09:30"),
    ("Team Meeting", "Monthly project review with the team.", "2024-07-17 11:00"),
    ("To-do list", 'First, help Frank place a food delivery order at "Hema Fresh," ordering two "Fresh Gift Packs." '
     'Then, send a message to Frank saying, "The price of the purchased goods is () yuan." Replace the parentheses '
     "with the actual amount, keeping one decimal place.", "2024-07-16 11:00"),
)
_FOOD_ACCOUNTS = (("password123", 500.0), ("password456", 300.0), ("password789", 150.0), ("password321", 800.0),
                  ("password654", 400.0), ("password654", 120.0))
_MERCHANTS = (  # name, id, service type, menu
    ("Domino's", "Pizza", (("Margherita Pizza", 68.0), ("Super Supreme Pizza", 88.0))),
    ("Rice Village Bibimbap", "Bibimbap", (("Stone Pot Bibimbap", 35.0), ("Korean Beef Bibimbap", 45.0))),
    ("Haidilao", "Hotpot", (("Beef Rolls", 68.0), ("Seafood Platter", 88.0))),
    ("Heytea", "Milk Tea", (("Cheese Milk Tea", 25.0), ("Four Seasons Spring Milk Tea", 22.0))),
    ("Hema Fresh", "Fresh Grocery", (("Organic Vegetable Pack", 15.0), ("Fresh Gift Pack", 99.0))),
    ("Jiutian BBQ", "BBQ", (("Korean Grilled Beef", 128.0), ("Grilled Pork Belly", 78.0))),
)


def _fail(message: str) -> dict:
    return {"status": False, "message": message}


class BaseApi:
    saved = ("wifi", "logged_in")

    def __init__(self):
        self.wifi = False
        self.logged_in = True

    def _load_scenario(self, config: dict) -> None:
        self.wifi = config.get("wifi", False)
        self.logged_in = config.get("logged_in", True)

    def turn_on_wifi(self):
        self.wifi = True
        return {"status": True, "message": "Wi-Fi has been turned on"}

    def login_device(self):
        self.logged_in = True
        return {"status": True, "message": "Device has been logged in"}


class MessageApi(BaseApi):
    saved = ("inbox",)
    capacity = 6

    def __init__(self):
        super().__init__()
        self.user_list = copy.deepcopy(_PHONE_USERS)
        self.inbox = {k: {"sender_id": s, "receiver_id": r, "message": m, "time": t} for k, (s, r, m, t) in _INBOX.items()}
        self.message_id_counter = len(_INBOX)

    def send_message(self, sender_name, receiver_name, message):
        if self.logged_in == False:  # noqa: E712 - the official compares with == False
            return _fail("Device not logged in, unable to send message")
        if self.wifi == False:  # noqa: E712
            return _fail("Wi-Fi is turned off, cannot send messages at this time")
        if len(self.inbox) >= self.capacity:
            return _fail("Inbox capacity is full. You need to ask the user which message to delete.")
        if sender_name not in self.user_list or receiver_name not in self.user_list:
            return _fail("Sender or receiver does not exist")
        self.message_id_counter += 1
        self.inbox[self.message_id_counter] = {"sender_id": self.user_list[sender_name]["user_id"],
                                               "receiver_id": self.user_list[receiver_name]["user_id"],
                                               "message": message}
        return {"status": True, "message": f"Message successfully sent to {receiver_name}."}

    def delete_message(self, message_id):
        if self.logged_in == False:  # noqa: E712
            return _fail("Device not logged in, unable to delete message")
        if message_id not in self.inbox:
            return _fail("Message ID does not exist")
        del self.inbox[message_id]
        return {"status": True, "message": f"Message ID {message_id} has been successfully deleted."}

    def view_messages_between_users(self, sender_name, receiver_name):
        if self.logged_in == False:  # noqa: E712
            return _fail("Device not logged in, unable to view message information")
        if sender_name not in self.user_list:
            return _fail("Sender does not exist")
        if receiver_name not in self.user_list:
            return _fail("Receiver does not exist")
        sid, rid = self.user_list[sender_name]["user_id"], self.user_list[receiver_name]["user_id"]
        found = [{"id": k, "sender": sender_name, "receiver": receiver_name, "message": m["message"]}
                 for k, m in self.inbox.items() if m["sender_id"] == sid and m["receiver_id"] == rid]
        return {"status": True, "messages": found} if found else _fail("No related message records found")

    def search_messages(self, user_name, keyword):
        if user_name not in self.user_list:
            return _fail("User does not exist")
        uid = self.user_list[user_name]["user_id"]
        found = []
        for k, m in self.inbox.items():
            if (m["sender_id"] == uid or m["receiver_id"] == uid) and keyword.lower() in m["message"].lower():
                found.append({"id": k, "sender_id": m["sender_id"], "receiver_id": m["receiver_id"], "message": m["message"]})
        return {"status": True, "messages": found} if found else _fail("No messages found containing the keyword")

    def get_all_message_times_with_ids(self):
        if self.logged_in == False:  # noqa: E712
            return _fail("Device not logged in, unable to retrieve all message times and their corresponding message IDs.")
        return {k: m["time"] for k, m in self.inbox.items()}  # a sent message has no time: KeyError, as officially

    def _extreme_message_id(self, what: str, later: bool):
        if self.logged_in == False:  # noqa: E712
            return _fail(f"Device not logged in, unable to retrieve the {what} sent message ID.")
        if not self.inbox:
            return _fail("No message records found")
        best_id = best_time = None
        for k, m in self.inbox.items():
            when = datetime.strptime(m["time"], "%Y-%m-%d")  # KeyError on a sent message, as officially
            if best_time is None or (when > best_time if later else when < best_time):
                best_id, best_time = k, when
        return {"status": True, "message": f"The {what} message ID is {best_id}", "message_id": best_id}

    def get_latest_message_id(self):
        return self._extreme_message_id("latest", True)

    def get_earliest_message_id(self):
        return self._extreme_message_id("earliest", False)


class ReminderApi(BaseApi):
    saved = ("reminder_list",)
    capacity = 6

    def __init__(self):
        super().__init__()
        self.reminder_list = {i: {"reminder_id": 1000 + i, "title": t, "description": d, "time": w, "notified": False}
                              for i, (t, d, w) in enumerate(_REMINDERS, 1)}
        self.reminder_id_counter = len(_REMINDERS)

    def view_reminder_by_title(self, title):
        if self.logged_in == False:  # noqa: E712
            return _fail("The device is not logged in, so you cannot view notifications")
        for reminder in self.reminder_list.values():
            if reminder["title"] == title:
                return {"status": True, "reminder": reminder}
        return _fail(f"No reminder found with the title '{title}'.")

    def add_reminder(self, title, description, time):
        if self.logged_in == False:  # noqa: E712
            return _fail("Device not logged in. Unable to add a new reminder.")
        if len(self.reminder_list) >= self.capacity:
            return _fail("Reminder capacity is full. Unable to add a new reminder.")
        self.reminder_id_counter += 1
        rid = self.reminder_id_counter
        self.reminder_list[rid] = {"reminder_id": rid, "title": title, "description": description, "time": time,
                                   "notified": False}
        return {"status": True, "message": f"Reminder '{title}' was successfully added."}

    def delete_reminder(self, reminder_id):
        if self.logged_in == False:  # noqa: E712
            return _fail("Device not logged in. Unable to delete the specified reminder.")
        if reminder_id not in self.reminder_list:
            return _fail("Reminder ID does not exist.")
        del self.reminder_list[reminder_id]
        return {"status": True, "message": f"Reminder ID {reminder_id} was successfully deleted."}

    def view_all_reminders(self):
        if not self.reminder_list:
            return _fail("No reminders found.")
        return {"status": True, "reminders": [{k: r[k] for k in ("title", "description", "time", "notified")}
                                              for r in self.reminder_list.values()]}


class FoodPlatform(BaseApi):
    saved = ("users", "logged_in_users", "orders")

    def __init__(self):
        super().__init__()
        self.users = {name: {"user_id": f"U{100 + i}", "password": pw, "balance": bal}
                      for i, (name, (pw, bal)) in enumerate(zip(_PEOPLE, _FOOD_ACCOUNTS))}
        self.merchant_list = {name: {"merchant_id": f"M{100 + i}", "service_type": kind,
                                     "menu": [{"product": p, "price": c} for p, c in menu]}
                              for i, (name, kind, menu) in enumerate(_MERCHANTS)}
        self.logged_in_users = []
        self.orders = []

    def _load_scenario(self, config: dict) -> None:
        super()._load_scenario(config)
        self.logged_in_users = config.get("logged_in_users", [])

    def login_food_platform(self, username, password):
        if self.wifi == False:  # noqa: E712
            return _fail("Wi-Fi is not enabled, unable to login")
        if username not in self.users:
            return _fail("User does not exist")
        if self.users[username]["password"] != password:
            return _fail("Incorrect password")
        if username in self.logged_in_users:
            return _fail(f"{username} is already logged in")
        self.logged_in_users.append(username)
        return {"status": True, "message": f"User {username} has successfully logged in!"}

    def view_logged_in_users(self):
        if not self.logged_in_users:
            return _fail("No users are currently logged in to the food platform")
        return {"status": True, "logged_in_users": self.logged_in_users}

    def check_balance(self, user_name):
        return self.users[user_name]["balance"] if user_name in self.users else 0.0

    def add_food_delivery_order(self, username, merchant_name, items):
        if username not in self.logged_in_users:
            return _fail(f"User {username} is not logged in to the food platform")
        if merchant_name not in self.merchant_list:
            return _fail("Merchant does not exist")
        total, lines = 0.0, []
        for item in items:
            product, quantity = item.get("product"), item.get("quantity", 1)
            if not isinstance(quantity, int) or quantity <= 0:
                return _fail(f"Invalid quantity {quantity} for product {product}")
            entry = next((e for e in self.merchant_list[merchant_name]["menu"] if e["product"] == product), None)
            if entry is None:
                return _fail(f"Product {product} does not exist in {merchant_name}'s menu")
            total += entry["price"] * quantity
            lines.append({"product": product, "quantity": quantity, "price_per_unit": entry["price"]})
        if total > self.users[username]["balance"]:
            return _fail("Insufficient balance to place the order")
        self.users[username]["balance"] -= total
        self.orders.append({"user_name": username, "merchant_name": merchant_name, "items": lines, "total_price": total})
        return {"status": True,
                "message": f"Food delivery order successfully placed with {merchant_name}. Total amount: {total} yuan"}

    def get_products(self, merchant_name):
        merchant = self.merchant_list.get(merchant_name)
        return merchant["menu"] if merchant else _fail(f"Merchant '{merchant_name}' does not exist")

    def view_orders(self, user_name):
        mine = [o for o in self.orders if o["user_name"] == user_name]
        return {"status": True, "orders": mine} if mine else _fail("User has no order records")

    def search_orders(self, keyword):
        found = [o for o in self.orders if keyword.lower() in o["merchant_name"].lower()
                 or any(keyword.lower() in i["product"].lower() for i in o.get("items", []))]
        return {"status": True, "orders": found} if found else _fail("No matching orders found")


CLASSES = {c.__name__: c for c in (BaseApi, MessageApi, ReminderApi, FoodPlatform)}
