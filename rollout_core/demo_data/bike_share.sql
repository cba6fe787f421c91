-- A city bike-sharing scheme: stations, bikes, riders and their trips in May 2024.

CREATE TABLE stations (
    station_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    district TEXT NOT NULL,
    capacity INTEGER NOT NULL
);

CREATE TABLE bikes (
    bike_id INTEGER PRIMARY KEY,
    model TEXT NOT NULL,
    purchase_year INTEGER NOT NULL,
    home_station_id INTEGER NOT NULL REFERENCES stations (station_id)
);

CREATE TABLE riders (
    rider_id INTEGER PRIMARY KEY,
    name TEXT NOT NULL,
    membership TEXT NOT NULL,
    signup_year INTEGER NOT NULL
);

CREATE TABLE trips (
    trip_id INTEGER PRIMARY KEY,
    bike_id INTEGER NOT NULL REFERENCES bikes (bike_id),
    rider_id INTEGER NOT NULL REFERENCES riders (rider_id),
    start_station_id INTEGER NOT NULL REFERENCES stations (station_id),
    end_station_id INTEGER NOT NULL REFERENCES stations (station_id),
    start_time TEXT NOT NULL,
    duration_minutes INTEGER NOT NULL
);

INSERT INTO stations (station_id, name, district, capacity) VALUES
    (1, 'Harbour Square', 'Waterfront', 24),
    (2, 'Mill Street', 'Old Town', 16),
    (3, 'Central Station', 'Centre', 40),
    (4, 'University Gate', 'Northside', 30),
    (5, 'Tannery Lane', 'Old Town', 12),
    (6, 'Riverside Park', 'Waterfront', 20),
    (7, 'Market Hall', 'Centre', 28),
    (8, 'Hilltop Library', 'Northside', 14),
    (9, 'Canal Basin', 'Eastgate', 18),
    (10, 'Foundry Yard', 'Eastgate', 22);

-- 30 bikes: every fifth a cargo bike, two in five electric, the rest classic.
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30)
INSERT INTO bikes (bike_id, model, purchase_year, home_station_id)
SELECT
    i,
    CASE i % 5 WHEN 0 THEN 'Cargo' WHEN 1 THEN 'Electric' WHEN 3 THEN 'Electric' ELSE 'Classic' END,
    2018 + (i * 3) % 6,
    ((i * 7) % 10) + 1
FROM n;

INSERT INTO riders (rider_id, name, membership, signup_year) VALUES
    (1, 'Ada Brennan', 'annual', 2019),
    (2, 'Ben Okoro', 'monthly', 2022),
    (3, 'Cleo Marchetti', 'casual', 2024),
    (4, 'Dmitri Volkov', 'annual', 2020),
    (5, 'Esme Farrow', 'annual', 2021),
    (6, 'Felix Grant', 'monthly', 2023),
    (7, 'Gala Rinaldi', 'casual', 2023),
    (8, 'Hector Ruiz', 'annual', 2018),
    (9, 'Iris Nakamura', 'monthly', 2021),
    (10, 'Jude Harlow', 'casual', 2024),
    (11, 'Kofi Mensah', 'annual', 2022),
    (12, 'Lena Fischer', 'monthly', 2020),
    (13, 'Milo Petrov', 'annual', 2019),
    (14, 'Nadia Karim', 'casual', 2022),
    (15, 'Oscar Lund', 'monthly', 2024),
    (16, 'Pia Hoffmann', 'annual', 2023),
    (17, 'Rafael Costa', 'casual', 2021),
    (18, 'Selma Aydin', 'annual', 2020),
    (19, 'Theo Blackwood', 'monthly', 2019),
    (20, 'Uma Patel', 'annual', 2024),
    (21, 'Victor Hale', 'casual', 2023),
    (22, 'Wanda Zielinski', 'annual', 2018),
    (23, 'Yusuf Demir', 'monthly', 2022),
    (24, 'Zara Whitfield', 'annual', 2021),
    (25, 'Emil Strand', 'casual', 2024);

-- 240 trips over May 2024; Central Station (3) starts the most, riders 24 and 25 never ride.
WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 240)
INSERT INTO trips (trip_id, bike_id, rider_id, start_station_id, end_station_id, start_time,
                   duration_minutes)
SELECT
    i,
    ((i * 11 + i / 5) % 30) + 1,
    CASE WHEN i % 10 = 0 THEN 5 ELSE ((i * 17) % 23) + 1 END,
    CASE WHEN i % 7 = 0 THEN 3 ELSE ((i * 3 + i / 7) % 10) + 1 END,
    ((i * 7 + 2) % 10) + 1,
    datetime('2024-05-01 06:00:00', '+' || ((i * 397) % 43200) || ' minutes'),
    4 + (i * i * 7) % 53
FROM n;
